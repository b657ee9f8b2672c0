"""`rotary` and `none` models as transformers' own GPTNeoXForCausalLM, and back.

The layers map one to one; only the fused QKV differs: ours is [3, H, D] (all queries, then keys,
then values), GPT-NeoX's is [H, 3, D] (per head). `none` is GPT-NeoX with no rotated dims."""
import torch
import transformers

from megatron.model.positional_embeddings.rope_scaling import parse_scaling

NATIVE_METHODS = ("rotary", "none")
# rotary-scaling types that transformers' rope_parameters computes as this project does (the export's
# logits are compared in tests/checkpoint/test_hf_export.py). Not mapped: `ntk` (static NTK; transformers has no such
# type) and `dynamic_ntk` (transformers keeps the frequencies of the longest input seen across calls, this
# project uses each forward's own length); those export as the custom folder, which runs rotary.py itself.
# `longrope` is mapped: transformers, as this project, picks short or long factors from each forward's own
# largest position.
ROPE_TYPES = {"linear": "linear", "yarn": "yarn", "llama3": "llama3", "longrope": "longrope"}


def native_problems(config) -> list[str]:
    """What GPTNeoXForCausalLM cannot hold of model `config` (a ModelConfig; empty: it holds all of it)."""
    problems = []
    if config.pos_emb not in NATIVE_METHODS:
        problems.append(f"pos-emb is {config.pos_emb!r}, and GPT-NeoX in transformers has only rotary "
                        "positions (rotary, or none as rotary of no dimensions)")
    if config.layers is not None:
        problems.append("layer-pattern is set (GPT-NeoX's layers are all alike)")
    if config.attention_temperature is not None:
        problems.append("attention-temperature is set (GPT-NeoX has no learned attention temperature)")
    if config.dape is not None:
        problems.append("dape is set (GPT-NeoX's attention has no learned edit of its scores)")
    if config.attention_output_gate is not None:
        problems.append("attention-output-gate is set (GPT-NeoX's attention has no output gate)")
    if config.attention_sink:
        problems.append("attention-sink is set (GPT-NeoX's attention has no sink)")
    if config.norm != "layernorm":
        problems.append(f"norm is {config.norm!r} (GPT-NeoX has LayerNorm only)")
    if config.activation != "gelu":
        problems.append(f"activation is {config.activation!r} (GPT-NeoX here is exported with exact gelu only)")
    scaling = rotary_scaling(config)
    if scaling is not None and scaling.type not in ROPE_TYPES:
        problems.append(f"rotary-scaling type is {scaling.type!r} (transformers' GPT-NeoX computes "
                        f"{' and '.join(ROPE_TYPES)} as this project does)")
    if config.pos_emb == "rotary" and config.option("rotary_unrotated_fraction"):
        problems.append(f"rotary-unrotated-fraction is {config.option('rotary_unrotated_fraction')} (p-RoPE; "
                        "transformers' GPT-NeoX rotates every frequency of its rotated dims)")
    if config.attention.window is not None:
        problems.append(f"attention-window is {config.attention.window} (GPT-NeoX attends to every earlier token)")
    return problems


def rotary_scaling(config):
    """The run's rotary-scaling as a RopeScaling, or None (plain rotary, or not rotary)."""
    if config.pos_emb != "rotary" or config.option("rotary_scaling") is None:
        return None
    return parse_scaling(config.option("rotary_scaling"), config.max_position_embeddings)


def rope_parameters(config) -> dict | None:
    """transformers' rope_parameters for the run's rotary-scaling (None: plain rotary)."""
    scaling = rotary_scaling(config)
    if scaling is None:
        return None
    params = {"rope_type": ROPE_TYPES[scaling.type], "factor": float(scaling.factor)}
    if scaling.type == "yarn":
        params.update(original_max_position_embeddings=scaling.original_max_position, beta_fast=scaling.beta_fast,
                      beta_slow=scaling.beta_slow)
        if scaling.attention_factor is not None:
            params["attention_factor"] = scaling.attention_factor
    if scaling.type == "llama3":
        params.update(original_max_position_embeddings=scaling.original_max_position,
                      low_freq_factor=float(scaling.low_freq_factor), high_freq_factor=float(scaling.high_freq_factor))
    if scaling.type == "longrope":
        params.update(original_max_position_embeddings=scaling.original_max_position,
                      short_factor=list(scaling.short_factor), long_factor=list(scaling.long_factor))
        if scaling.attention_factor is not None:
            params["attention_factor"] = float(scaling.attention_factor)
    return params


def gpt_neox_config(config, tokenizer) -> transformers.GPTNeoXConfig:
    rotary = config.pos_emb == "rotary"
    return transformers.GPTNeoXConfig(rope_parameters=rope_parameters(config),
        vocab_size=config.padded_vocab_size, hidden_size=config.hidden_size, num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size or 4 * config.hidden_size, hidden_act="gelu",
        rotary_pct=config.option("rotary_pct") if rotary else 0.0,
        rotary_emb_base=config.option("rotary_emb_base"), max_position_embeddings=config.max_position_embeddings,
        layer_norm_eps=config.layernorm_epsilon, use_parallel_residual=config.gpt_j_residual,
        tie_word_embeddings=not config.no_weight_tying, attention_dropout=0.0, hidden_dropout=0.0,
        bos_token_id=tokenizer.eod, eos_token_id=tokenizer.eod, pad_token_id=tokenizer.pad)


def _qkv_to_per_head(t, heads):  # ours [3, H, D, ...] -> GPT-NeoX's [H, 3, D, ...]
    return t.reshape(3, heads, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def _qkv_from_per_head(t, heads):  # GPT-NeoX's [H, 3, D, ...] -> ours [3, H, D, ...]
    return t.reshape(heads, 3, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


LAYER_NAMES = ("input_layernorm.weight", "input_layernorm.bias", "post_attention_layernorm.weight",
               "post_attention_layernorm.bias", "attention.dense.weight", "attention.dense.bias",
               "mlp.dense_h_to_4h.weight", "mlp.dense_h_to_4h.bias", "mlp.dense_4h_to_h.weight",
               "mlp.dense_4h_to_h.bias")
TOP_NAMES = {"word_embeddings.weight": "gpt_neox.embed_in.weight",
             "final_layernorm.weight": "gpt_neox.final_layer_norm.weight",
             "final_layernorm.bias": "gpt_neox.final_layer_norm.bias",
             "output_head.weight": "lm_head.weight"}


def _name_pairs(num_layers):
    """(ours, GPT-NeoX's) for every weight but the fused QKV."""
    pairs = list(TOP_NAMES.items())
    for i in range(num_layers):
        pairs += [(f"layers.{i}.{n}", f"gpt_neox.layers.{i}.{n}") for n in LAYER_NAMES]
    return pairs


def to_gpt_neox_state(ours: dict, num_layers: int, heads: int) -> dict:
    state = {theirs: ours[mine] for mine, theirs in _name_pairs(num_layers) if mine in ours}
    if "lm_head.weight" not in state:  # tied: GPT-NeoX's head reads the embedding too
        state["lm_head.weight"] = state["gpt_neox.embed_in.weight"]
    for i in range(num_layers):
        for kind in ("weight", "bias"):
            state[f"gpt_neox.layers.{i}.attention.query_key_value.{kind}"] = _qkv_to_per_head(
                ours[f"layers.{i}.attention.query_key_value.{kind}"], heads)
    return state


def from_gpt_neox_state(theirs: dict, num_layers: int, heads: int, tied: bool) -> dict:
    """The round trip: a GPTNeoXForCausalLM state dict -> this project's GPTModel state dict."""
    state = {mine: theirs[t] for mine, t in _name_pairs(num_layers) if not (tied and mine == "output_head.weight")}
    for i in range(num_layers):
        for kind in ("weight", "bias"):
            state[f"layers.{i}.attention.query_key_value.{kind}"] = _qkv_from_per_head(
                theirs[f"gpt_neox.layers.{i}.attention.query_key_value.{kind}"], heads)
    return state


def build_gpt_neox(source) -> transformers.GPTNeoXForCausalLM:
    config = source.model.config
    model = transformers.GPTNeoXForCausalLM(gpt_neox_config(config, source.tokenizer))
    state = to_gpt_neox_state(source.model.state_dict(), config.num_layers, config.num_attention_heads)
    missing, unexpected = model.load_state_dict(state, strict=False)
    leftover = [k for k in missing if "rotary" not in k and "inv_freq" not in k]
    assert not leftover and not unexpected, (leftover, unexpected)  # the mapping covers every weight
    return model.to(torch.float32).eval()
