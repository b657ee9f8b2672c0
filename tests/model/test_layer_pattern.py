"""`layer-pattern` (hybrid layers): the issue's three example patterns build, a hybrid model equals a model
assembled by hand from single-method models' layers and plans, every attention path agrees with a float64
forward, the KV cache generates like a full forward, the checkpoint's model config carries the pattern,
the Hugging Face export gives the same logits, and bad entries are one-paragraph errors."""
import copy
import dataclasses

import pytest
import torch
from tests.support.hf_export import TRAIN_LENGTH, greedy_reference, tiny_config
from tests.support.layer_patterns import PATTERNS, W

from megatron.errors import NeoXArgsError
from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.model.attention import AttentionRun, plan_attention
from megatron.model.attention.flex_kernel import reference_math
from megatron.model.kv_cache import KVCache
from megatron.model.layer_pattern import Layer
from megatron.model.model_config import ModelConfig, differences
from megatron.neox_arguments import NeoXArgs
from megatron.text_generation import generate_tokens
from megatron.tokenizer import build_tokenizer


def args_of(name, **overrides):
    config = tiny_config(PATTERNS[name]["pos_emb"]) | PATTERNS[name] | {"rotary_pct": 1.0} | overrides
    return NeoXArgs.from_dict(config)


def hybrid(name, seed=0, **overrides):
    args = args_of(name, **overrides)
    torch.manual_seed(seed)
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size)).eval()
    with torch.no_grad():  # positional parameters away from their initial values, as a trained model's are
        for pe in model.positional_embeddings():
            for p in pe.parameters():
                p.add_(0.3 * torch.rand_like(p))
    return args, model


@pytest.mark.parametrize("name", PATTERNS)
def test_each_layer_gets_the_kind_its_entry_says(name):
    _, model = hybrid(name)
    pattern = PATTERNS[name]["layer_pattern"]
    for i, kind in enumerate(model.layer_kinds):
        entry = pattern[i % len(pattern)]
        assert kind.pos_emb == entry.get("pos-emb", PATTERNS[name]["pos_emb"])
        assert kind.window == entry.get("attention-window")
        if "rotary-emb-base" in entry:
            assert kind.options["rotary_emb_base"] == entry["rotary-emb-base"]
        module = model.pos_embs[model.layer_module[i]]
        assert module.name == kind.pos_emb and model.windows[model.layer_module[i]] == kind.window
    # layers of one kind share one module; distinct kinds do not
    assert len(model.pos_embs) == len(set(model.layer_kinds))


@pytest.mark.parametrize("name", PATTERNS)
def test_a_hybrid_model_equals_one_assembled_from_single_method_models(name):
    """Layer i of the hybrid against layer i run with the plan of a plain model (one method, one window)
    that holds the same weights: the pattern routes each layer to the right method, options and window."""
    args, model = hybrid(name)
    tokens = torch.randint(0, 256, (2, 4 * TRAIN_LENGTH), generator=torch.Generator().manual_seed(3))
    positions = torch.arange(tokens.shape[1])
    x = model.word_embeddings(tokens)
    with torch.no_grad():
        for i, kind in enumerate(model.layer_kinds):
            single_args = NeoXArgs.from_dict(tiny_config(kind.pos_emb) | {
                "num_layers": args.num_layers, "attention_window": kind.window, "rotary_pct": 1.0,
                **kind.options})
            single = GPTModel(model_config(single_args, model.vocab_size)).eval()
            single.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("pos_embs.")},
                                   strict=False)
            single.pos_embs[0].load_state_dict(model.pos_embs[model.layer_module[i]].state_dict())
            plan = plan_attention(single.pos_embs[0], positions, AttentionRun(impl="sdpa",
                                                                              window=single_args.attention_window,
                                                                              block_size=512, needs_grad=False,
                                                                              dropout_p=0.0, dtype=torch.float32,
                                                                              batch=tokens.shape[0]))
            x = single.layers[i](x, plan)
        expected = torch.nn.functional.linear(model.final_layernorm(x), model.word_embeddings.weight)
        torch.testing.assert_close(model(tokens), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("impl", ["sdpa", "blocked", "flex"])
@pytest.mark.parametrize("name", PATTERNS)
def test_every_path_agrees_with_a_float64_forward(name, impl):
    args, model = hybrid(name, attention_impl=impl)
    reference = copy.deepcopy(model).double()
    reference.attention_config = dataclasses.replace(reference.attention_config, impl="sdpa")
    tokens = torch.randint(0, 256, (1, 4 * TRAIN_LENGTH), generator=torch.Generator().manual_seed(4))
    with torch.no_grad(), reference_math():
        torch.testing.assert_close(model(tokens).double(), reference(tokens), atol=2e-5, rtol=0)


@pytest.mark.parametrize("name", PATTERNS)
def test_cached_generation_equals_a_full_forward_per_token(name):
    _, model = hybrid(name)
    prompt = torch.randint(0, 256, (9,), generator=torch.Generator().manual_seed(5)).tolist()
    new = 4 * TRAIN_LENGTH - len(prompt)  # past the training length and far past the window
    assert generate_tokens(model, [prompt], max_new_tokens=new)[0] == greedy_reference(model, prompt, new)


def test_the_checkpoints_model_config_carries_the_pattern():
    args, model = hybrid("gemma_5_to_1")
    saved = model_config(args, model.vocab_size)
    assert ModelConfig.from_record(saved.record()) == saved
    plain = NeoXArgs.from_dict(tiny_config("rotary") | {"num_layers": 6, "rotary_pct": 1.0})
    assert differences(saved, model_config(plain, model.vocab_size)) == [
        f"layer-pattern: checkpoint {PATTERNS['gemma_5_to_1']['layer_pattern']!r}, this run None"]


def test_a_plain_model_is_unchanged_by_the_pattern_machinery():
    """No pattern: one positional module named pos_embs.0, as checkpoints before patterns have it."""
    args = NeoXArgs.from_dict(tiny_config("kerple_log"))
    model = GPTModel(model_config(args, 384))
    assert [k for k in model.state_dict() if k.startswith("pos_embs.")] == ["pos_embs.0.raw_r1", "pos_embs.0.raw_r2"]
    assert model.layer_module == [0, 0] and model.windows == [None]


@pytest.mark.parametrize("pattern,message", [
    ([{"pos-emb": "learned"}], r"layer-pattern: entry 1: pos-emb 'learned' adds positions to the token embeddings"),
    ([{"pos-emb": "alibi", "rotary-emb-base": 5}], r"entry 1 of 1 sets rotary-emb-base, which pos-emb 'alibi' "
                                                   r"does not take"),
    ([{}, {"attention-window": 0}], r"entry 2 of 2: attention-window is 0; it must be a positive number"),
    ([{"pos-emb": "kerple"}], r"entry 1 of 1: unknown positional embedding 'kerple'"),
    ([{"pos-emb": "rotary", "rotary-pct": 3}], r"entry 1 of 1: rotary-pct: must lie in \(0, 1\]"),
    ([], r"layer-pattern: is \[\]; give a non-empty list"),
])
def test_a_bad_entry_is_one_paragraph_naming_the_entry(pattern, message):
    with pytest.raises(NeoXArgsError, match=message) as refused:
        NeoXArgs.from_dict(tiny_config("rotary") | {"layer_pattern": pattern})
    assert "\n" not in str(refused.value)


def test_windowed_layers_keep_only_their_window_in_the_kv_cache():
    """Gemma's pattern, two left-padded prompts: each row continues as it would alone, and after every
    step a windowed layer holds W - 1 keys while a global layer keeps its buffer for every slot."""
    _, model = hybrid("gemma_5_to_1")
    prompts = [list(range(30, 37)), list(range(50, 62))]
    new = 3 * TRAIN_LENGTH
    together = generate_tokens(model, prompts, max_new_tokens=new)
    assert together == [greedy_reference(model, p, new) for p in prompts]
    cache = KVCache(len(model.layers), 1, 64, windows=model.layer_windows())
    with torch.no_grad():
        model(torch.tensor([prompts[1]]), cache=cache)
        for step in range(40):
            model(torch.tensor([[7]]), cache=cache)
            held = [layer.keys.shape[2] for layer in cache.layers]
            assert held == [W - 1] * 5 + [cache.capacity], held


def test_the_dry_run_lists_each_layer_and_each_modules_training_path():
    from megatron.model.attention.registry import STRATEGIES
    from megatron.model.layer_pattern import describe_layers, training_plans
    args = args_of("kerple_global_alibi_window")
    model = model_config(args, None)
    lines = describe_layers(model).splitlines()
    assert [line.split("#")[0].split(None, 2)[2].strip() for line in lines] == \
        ["alibi, window 6", "kerple_log", "alibi, window 6", "kerple_log"]
    assert [line.rsplit(" ", 1)[1] for line in lines] == ["0", "1", "0", "1"]
    plans = training_plans(model, args.seq_length, args.train_micro_batch_size_per_gpu, args.reset_attention_mask)
    names = set(STRATEGIES)
    assert len(plans) == 2 and all(line.split(": ", 1)[1].split(",")[0] in names for line in plans), plans


# Typed layers written out as literals, as a config file's pattern reads (the same entries as PATTERNS').
TYPED = {
    "gemma_5_to_1": dict(pos_emb="rotary", num_layers=6, options={"rotary_pct": 1.0},
                         layers=(Layer(window=W, options={"rotary_emb_base": 10000}),) * 5
                         + (Layer(options={"rotary_emb_base": 1000000}),)),
    "kerple_global_alibi_window": dict(pos_emb="kerple_log", num_layers=4,
                                       layers=(Layer(pos_emb="alibi", window=W), Layer(pos_emb="kerple_log"))),
}


@pytest.mark.parametrize("name", TYPED)
def test_a_literal_with_typed_layers_builds_the_model_the_config_file_does(name):
    """Same parameters (names, shapes, values from one seed) and the same float64 logits as the YAML path."""
    args = args_of(name)
    from_file = model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size)
    literal = ModelConfig(hidden_size=32, num_attention_heads=4, padded_vocab_size=from_file.padded_vocab_size,
                          tokenizer_type="ByteLevelTokenizer", **TYPED[name])
    assert literal.layers == from_file.layers
    models = []
    for config in (from_file, literal):
        torch.manual_seed(0)
        models.append(GPTModel(config).double().eval())
    states = [model.state_dict() for model in models]
    assert [(k, v.shape) for k, v in states[0].items()] == [(k, v.shape) for k, v in states[1].items()]
    assert all(torch.equal(states[0][k], states[1][k]) for k in states[0])
    tokens = torch.randint(0, 256, (2, 4 * TRAIN_LENGTH), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        logits = [model(tokens) for model in models]
    assert logits[0].dtype == torch.float64 and torch.equal(logits[0], logits[1])
    # the record of a literal reads back as the same typed layers
    assert ModelConfig.from_record(literal.record()).layers == literal.layers


def test_typed_layers_refuse_what_the_pattern_refuses_and_leave_out_what_the_model_gives():
    config = ModelConfig(num_layers=2, hidden_size=32, num_attention_heads=4, padded_vocab_size=64, pos_emb="rotary",
                         layers=(Layer(), Layer(pos_emb="alibi", options={"rotary_emb_base": 5})))
    with pytest.raises(NeoXArgsError, match="entry 2 of 2 sets rotary-emb-base, which pos-emb 'alibi' does not take"):
        GPTModel(config)
    with pytest.raises(ValueError, match=r"layers is \[\{'pos-emb': 'none'\}\]; give a non-empty sequence of "
                                         r"layer_pattern.Layer entries"):
        ModelConfig(layers=[{"pos-emb": "none"}])
    # a window left to the model follows the run's own window (dataclasses.replace), one set by the entry does not
    windowed = ModelConfig(num_layers=2, pos_emb="rotary", layers=(Layer(), Layer(window=None)))
    windowed = dataclasses.replace(windowed, attention=dataclasses.replace(windowed.attention, window=8))
    from megatron.model.layer_pattern import layer_kinds
    assert [kind.window for kind in layer_kinds(windowed)] == [8, None]


# A model-states record as this project wrote it before the typed layers (schema 2): the pattern as the config
# file spelled it, both spellings of a key, and an option of the run's method in one entry only.
SCHEMA_2_RECORD = {
    "schema": 2, "num_layers": 4, "hidden_size": 32, "num_attention_heads": 4, "intermediate_size": None,
    "padded_vocab_size": 384, "tokenizer_type": "ByteLevelTokenizer", "norm": "layernorm", "layernorm_epsilon": 1e-05,
    "activation": "gelu", "no_weight_tying": False, "gpt_j_residual": False, "pos_emb": "kerple_log",
    "pos_emb_per_layer": False,
    "layer_pattern": [{"pos-emb": "alibi", "attention-window": 6}, {"pos_emb": "rotary", "rotary-emb-base": 500}],
    "attention_temperature": None, "dape": None, "attention_output_gate": None, "attention_sink": None,
    "seq_length": 16, "max_position_embeddings": 16, "seq_length_val": 16, "attention_window": None,
    "kerple_eps": 0.01, "rotary_emb_base": 10000, "rotary_pct": 0.5, "rotary_unrotated_fraction": 0.0,
    "vocab_file": None, "merge_file": None,
}


def test_an_older_records_raw_pattern_reads_as_typed_layers_and_records_the_same_bytes():
    import pickle

    from megatron.model.layer_pattern import layer_kinds
    config = ModelConfig.from_record(copy.deepcopy(SCHEMA_2_RECORD))
    assert config.layers == (Layer(pos_emb="alibi", window=6),
                             Layer(pos_emb="rotary", options={"rotary_emb_base": 500}))
    assert [(k.pos_emb, k.window, k.options.get("rotary_emb_base")) for k in layer_kinds(config)] == \
        [("alibi", 6, None), ("rotary", None, 500)] * 2
    assert pickle.dumps(config.record()) == pickle.dumps(SCHEMA_2_RECORD)
    model = GPTModel(config)
    assert [k for k in model.state_dict() if k.startswith("pos_embs.")] == [] and model.layer_module == [0, 1, 0, 1]
    damaged = SCHEMA_2_RECORD | {"layer_pattern": [{"pos-emb": "alibi", "attention-window": -1}]}
    with pytest.raises(NeoXArgsError, match="entry 1 of 1: attention-window is -1; it must be a positive number"):
        ModelConfig.from_record(damaged)


def test_a_pattern_entry_that_mixes_heads_refuses_sequence_parallelism_at_the_config():
    """The config's sequence-parallel check reads the pattern's layers, not the run's method alone."""
    pattern = [{}, {"pos-emb": "kerple_log", "dape": {"version": 1}}]
    split = tiny_config("alibi") | {"sequence_parallel_size": 2}
    with pytest.raises(NeoXArgsError, match=r"sequence-parallel-size: sequence-parallel-size > 1 splits the attention "
                                            r"heads over ranks .* but dape's learned function") as refused:
        NeoXArgs.from_dict(split | {"layer_pattern": pattern}, world_size=2)
    assert "\n" not in str(refused.value)
    NeoXArgs.from_dict(split | {"layer_pattern": pattern[:1]}, world_size=2)
