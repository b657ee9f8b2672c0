"""`GPTModel(config: ModelConfig)`: a model is built and run from its config alone, written out as literals
(no run config anywhere), and a checkpoint's `model_config` record of the first format still reads."""
from dataclasses import replace

import torch
import transformers

from megatron.model import GPTModel
from megatron.model.attention.config import AttentionConfig
from megatron.model.model_config import ARCHITECTURE_KEYS, ModelConfig, differences
from tools.ckpts.hf_export.native import to_gpt_neox_state


VOCAB = 96


def rotary_config(**changes) -> ModelConfig:
    """A small rotary decoder: the fields away from their defaults."""
    return replace(ModelConfig(
        num_layers=2, hidden_size=32, num_attention_heads=4, intermediate_size=80, padded_vocab_size=VOCAB,
        tokenizer_type="ByteLevelTokenizer", no_weight_tying=True, pos_emb="rotary",
        options={"rotary_pct": 0.25, "rotary_emb_base": 10000}, lengths={"seq_length": 40, "max_position_embeddings": 40}),
        **changes)


# A checkpoint's record as checkpoints before `schema` wrote it (schema 1: no schema, no tokenizer files, no
# layer-pattern, attention-temperature or dape), written out as literals: it must keep reading as the same model.
SCHEMA_1_RECORD = {
    "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": None,
    "padded_vocab_size": 384, "tokenizer_type": "ByteLevelTokenizer", "norm": "layernorm", "layernorm_epsilon": 1e-05,
    "activation": "gelu", "no_weight_tying": True, "gpt_j_residual": False, "pos_emb": "kerple_log",
    "pos_emb_per_layer": False, "seq_length": 64, "max_position_embeddings": 64,
    "seq_length_val": 64, "attention_window": None, "kerple_eps": 0.01,
}


def test_every_field_defaults_to_its_config_keys_default():
    """A literal ModelConfig and a config file that leaves the same keys out build the same model: the fields'
    defaults are the config keys' (the position table's rows derived from seq-length, as the config does)."""
    from megatron.neox_arguments import NeoXArgs
    args = NeoXArgs.from_dict({"train_micro_batch_size_per_gpu": 1, "tokenizer_type": "GPT2BPETokenizer"})
    literal = ModelConfig()
    assert {k: getattr(literal, k) for k in ARCHITECTURE_KEYS if k != "padded_vocab_size"} == \
        {k: getattr(args.model, k) for k in ARCHITECTURE_KEYS if k != "padded_vocab_size"}
    assert literal.lengths.items() <= args.model.lengths.items() and literal.attention == args.model.attention
    small = dict(num_layers=1, hidden_size=32, num_attention_heads=4, padded_vocab_size=64)
    shapes = [{k: v.shape for k, v in GPTModel(replace(c, **small)).state_dict().items()} for c in (literal, args.model)]
    assert shapes[0] == shapes[1]


def test_a_model_built_from_a_literal_config_matches_transformers_gpt_neox():
    torch.manual_seed(0)
    model = GPTModel(rotary_config()).eval()
    reference = transformers.GPTNeoXForCausalLM(transformers.GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=80,
        hidden_act="gelu", rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=64, layer_norm_eps=1e-5,
        use_parallel_residual=False, tie_word_embeddings=False, attention_dropout=0.0, hidden_dropout=0.0)).eval()
    missing, unexpected = reference.load_state_dict(to_gpt_neox_state(model.state_dict(), num_layers=2, heads=4),
                                                    strict=False)
    assert not unexpected and all("rotary" in k or "inv_freq" in k for k in missing), missing
    ids = torch.randint(0, VOCAB, (2, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference(ids).logits, atol=2e-5, rtol=1e-4)


def test_per_run_choices_are_applied_to_the_config_and_leave_the_model_the_same():
    torch.manual_seed(0)
    whole = {"rotary_pct": 1.0, "rotary_emb_base": 10000}  # every dim rotated, so that scaling has dims to scale
    model = GPTModel(rotary_config(options=whole)).eval()
    windowed = GPTModel(rotary_config(options=whole, attention=AttentionConfig(impl="blocked", window=8, block_size=16),
                                      run_options={"rotary_scaling": {"type": "linear", "factor": 2.0}})).eval()
    windowed.load_state_dict(model.state_dict())  # the same weights: window and scaling are the run's
    assert windowed.layer_windows() == [8, 8] and model.layer_windows() == [None, None]
    assert windowed.pos_embs[0].options.rotary_scaling == {"type": "linear", "factor": 2.0}
    assert windowed.config == model.config and differences(model.config, windowed.config) == []
    ids = torch.randint(0, VOCAB, (1, 40), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        assert not torch.allclose(model(ids), windowed(ids))


def test_a_schema_1_record_reads_as_the_model_it_describes():
    config = ModelConfig.from_record(SCHEMA_1_RECORD)
    assert (config.pos_emb, config.num_layers, config.padded_vocab_size, config.options) == \
        ("kerple_log", 2, 384, {"kerple_eps": 0.01})
    assert (config.attention_temperature, config.dape, config.tokenizer_files) == (None, None, {})
    assert config.lengths == {"seq_length": 64, "max_position_embeddings": 64, "seq_length_val": 64,
                              "attention_window": None}
    assert {k: v for k, v in config.record().items() if k != "schema"} == \
        {**SCHEMA_1_RECORD, "layer_pattern": None, "attention_temperature": None, "dape": None,
         "attention_output_gate": None, "attention_sink": None}
    model = GPTModel(config)
    assert model.word_embeddings.weight.shape == (384, 64) and model.output_head is not None
    assert differences(config, replace(config, num_layers=3)) == ["num-layers: checkpoint 2, this run 3"]
