"""`rotary-scaling` (megatron/model/positional_embeddings/rope_scaling.py) against transformers'
RoPE utilities (the pinned version's ROPE_INIT_FUNCTIONS and Llama's rotary application), `factor: 1`
against plain rotary, the KV cache against recompute, and the config's errors."""
import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from megatron.model.positional_embeddings import build_positional_embedding, checkpoint_options
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.text_generation import generate_tokens
from tests.support.generation import PROMPTS, TRAIN_LENGTH, tiny_model

HEADS, HEAD_DIM, ORIGINAL = 2, 32, 64


def hf_config(rope_type, factor, pct=1.0, max_positions=ORIGINAL, **extra):
    parameters = {"rope_type": rope_type, "rope_theta": 10000.0, "factor": factor, "partial_rotary_factor": pct,
                  **extra}
    return LlamaConfig(hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS, max_position_embeddings=max_positions,
                       rope_parameters=parameters)


def ours(scaling, pct=1.0):
    return build_positional_embedding("rotary", HEADS, HEAD_DIM, HEADS * HEAD_DIM, rotary_pct=pct,
                                      max_position_embeddings=ORIGINAL, rotary_scaling=scaling)


BASE = {"train-micro-batch-size-per-gpu": 1, "pos-emb": "rotary"}


# ------------------------------------------------------------------ llama3 and longrope (issue 38)
LLAMA3_CASES = [(8.0, 1.0, 4.0), (4.0, 2.0, 8.0), (32.0, 1.0, 4.0), (1.0, 1.0, 4.0)]


def llama3(factor, low, high):
    return {"type": "llama3", "factor": factor, "original-max-position": ORIGINAL, "low-freq-factor": low,
            "high-freq-factor": high}


def llama3_hf(factor, low, high, pct=1.0):
    return hf_config("llama3", factor, pct, original_max_position_embeddings=ORIGINAL, low_freq_factor=low,
                     high_freq_factor=high)


def longrope(factor, pct=1.0, attention=None):
    short, long = longrope_factors(pct)
    scaling = {"type": "longrope", "factor": factor, "original-max-position": ORIGINAL, "short-factor": short,
               "long-factor": long}
    return scaling if attention is None else {**scaling, "attention-factor": attention}


def longrope_hf(factor, pct=1.0, attention=None):
    short, long = longrope_factors(pct)
    extra = {} if attention is None else {"attention_factor": attention}
    return hf_config("longrope", factor, pct, max_positions=int(factor * ORIGINAL),
                     original_max_position_embeddings=ORIGINAL, short_factor=short, long_factor=long, **extra)


def longrope_factors(pct=1.0):
    pairs = int(HEAD_DIM * pct) // 2
    return [1.0 + 0.05 * i for i in range(pairs)], [1.0 + 0.9 * i ** 1.5 for i in range(pairs)]


@pytest.mark.parametrize("pct", [1.0, 0.5])
@pytest.mark.parametrize("factor", [1.0, 2.0, 8.0])
def test_linear_matches_transformers(factor, pct):
    expected, attention = ROPE_INIT_FUNCTIONS["linear"](hf_config("linear", factor, pct), "cpu")
    got, got_attention = ours({"type": "linear", "factor": factor}, pct).frequencies()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)
    assert got_attention == attention == 1.0


@pytest.mark.parametrize("seq_len", [1, ORIGINAL, ORIGINAL + 1, 4 * ORIGINAL, 32 * ORIGINAL])
@pytest.mark.parametrize("factor", [1.0, 2.0, 4.0])
def test_dynamic_ntk_matches_transformers_at_every_length(factor, seq_len):
    # transformers' dynamic type reads the training length from max_position_embeddings.
    expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](hf_config("dynamic", factor), "cpu", seq_len=seq_len)
    got, attention = ours({"type": "dynamic_ntk", "factor": factor, "original-max-position": ORIGINAL}).frequencies(seq_len)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)
    assert attention == 1.0


@pytest.mark.parametrize("factor", [2.0, 4.0])
def test_static_ntk_is_transformers_dynamic_ntk_where_its_base_stretch_equals_the_factor(factor):
    # transformers has no static NTK type; its dynamic base multiplier s*n/L0 - (s-1) equals s at
    # n = L0 (2s - 1) / s, where both must give base * s^(d/(d-2)).
    seq_len = ORIGINAL * (2 * factor - 1) / factor
    expected, _ = ROPE_INIT_FUNCTIONS["dynamic"](hf_config("dynamic", factor), "cpu", seq_len=seq_len)
    got, _ = ours({"type": "ntk", "factor": factor}).frequencies()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("pct", [1.0, 0.5])
@pytest.mark.parametrize("factor,betas,attention", [(2.0, {}, None), (4.0, {}, None), (16.0, {}, None),
                                                    (4.0, {"beta_fast": 16, "beta_slow": 2}, None),
                                                    (8.0, {}, 1.3)])
def test_yarn_frequencies_and_attention_factor_match_transformers(factor, betas, attention, pct):
    extra = {"original_max_position_embeddings": ORIGINAL, **betas}
    if attention is not None:
        extra["attention_factor"] = attention
    expected, expected_attention = ROPE_INIT_FUNCTIONS["yarn"](
        hf_config("yarn", factor, pct, max_positions=int(factor * ORIGINAL), **extra), "cpu")
    scaling = {"type": "yarn", "factor": factor, "original-max-position": ORIGINAL,
               **{k.replace("_", "-"): v for k, v in betas.items()}}
    if attention is not None:
        scaling["attention-factor"] = attention
    got, got_attention = ours(scaling, pct).frequencies()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)
    assert got_attention == pytest.approx(expected_attention, rel=1e-12)


def test_yarn_rotation_matches_llamas_rotary_application():
    """Layout and attention factor: Llama rotates q and k with cos and sin scaled by the factor."""
    config = hf_config("yarn", 4.0, max_positions=4 * ORIGINAL, original_max_position_embeddings=ORIGINAL)
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, HEADS, 200, HEAD_DIM, dtype=torch.float32).unbind(0)
    positions = torch.arange(200)
    cos, sin = LlamaRotaryEmbedding(config)(q, positions[None])
    expected = apply_rotary_pos_emb(q, k, cos, sin)
    got = ours({"type": "yarn", "factor": 4, "original-max-position": ORIGINAL}).rotate_qk(q, k, positions, positions)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=5e-5)  # float32 angles up to 200 rad


@pytest.mark.parametrize("kind", ["linear", "ntk", "yarn"])
def test_factor_one_is_plain_rotary_exactly(kind):
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, HEADS, 300, HEAD_DIM).unbind(0)
    positions = torch.arange(300)
    plain = ours(None, 0.5).rotate_qk(q, k, positions, positions)
    scaled = ours({"type": kind, "factor": 1}, 0.5).rotate_qk(q, k, positions, positions)
    assert all(torch.equal(a, b) for a, b in zip(plain, scaled))


def test_scaling_changes_rotation_past_factor_one():
    q, k = torch.randn(2, 1, HEADS, 8, HEAD_DIM).unbind(0)
    positions = torch.arange(8)
    plain = ours(None).rotate_qk(q, k, positions, positions)[0]
    assert not torch.allclose(plain, ours({"type": "linear", "factor": 2}).rotate_qk(q, k, positions, positions)[0])


@pytest.mark.parametrize("scaling", [{"type": "linear", "factor": 4}, {"type": "yarn", "factor": 4},
                                     {"type": "ntk", "factor": 4}])
def test_static_scaling_cached_generation_is_recompute_past_the_training_length(scaling):
    model = tiny_model("rotary", rotary_scaling={**scaling, "original-max-position": TRAIN_LENGTH})
    assert all(pe.cache_exact for pe in model.positional_embeddings())
    new = 3 * TRAIN_LENGTH
    assert generate_tokens(model, PROMPTS, max_new_tokens=new) == \
        generate_tokens(model, PROMPTS, max_new_tokens=new, recompute=True)


def test_dynamic_ntk_declares_its_cache_inexact_and_is_plain_within_the_original_length():
    dynamic = tiny_model("rotary", rotary_scaling={"type": "dynamic_ntk", "factor": 4,
                                                   "original-max-position": TRAIN_LENGTH})
    plain = tiny_model("rotary")
    assert not any(pe.cache_exact for pe in dynamic.positional_embeddings())
    prompt = torch.tensor([PROMPTS[0]])  # 11 tokens, within the 16 trained
    with torch.inference_mode():
        assert torch.equal(dynamic(prompt), plain(prompt))


def test_a_checkpoint_need_not_agree_on_rotary_scaling():
    assert "rotary_scaling" not in checkpoint_options("rotary")
    assert "rotary_pct" in checkpoint_options("rotary")


@pytest.mark.parametrize("values,message", [
    ({"pos-emb": "alibi", "rotary-scaling": {"type": "yarn", "factor": 4}},
     "rotary-scaling: is set, but pos-emb is 'alibi', which has no such option (only rotary does)"),
    ({"rotary-scaling": {"type": "ntk_by_parts", "factor": 4}},
     "rotary-scaling: type is 'ntk_by_parts'; choose one of ['linear', 'ntk', 'dynamic_ntk', 'yarn', 'llama3', "
     "'longrope']"),
    ({"rotary-scaling": {"type": "llama3", "factor": 8, "low-freq-factor": 4, "high-freq-factor": 4}},
     "rotary-scaling: low-freq-factor (4) must be below high-freq-factor (4)"),
    ({"rotary-scaling": {"type": "yarn", "factor": 8, "high-freq-factor": 4}},
     "rotary-scaling: high-freq-factor is read by type llama3 only; remove it or set type: llama3."),
    ({"rotary-scaling": {"type": "longrope", "factor": 8, "short-factor": [1, 1]}},
     "rotary-scaling: type longrope needs long-factor: a list of positive numbers, one per rotated frequency pair"),
    ({"rotary-scaling": {"type": "longrope", "factor": 8, "short-factor": [1, 0], "long-factor": [1, 2]}},
     "rotary-scaling: type longrope needs short-factor: a list of positive numbers"),
    ({"rotary-scaling": {"type": "linear", "factor": 0.5}}, "rotary-scaling: factor must be a number >= 1"),
    ({"rotary-scaling": {"type": "linear", "factor": 2, "scale": 3}}, "rotary-scaling: unknown key(s) ['scale']"),
    ({"rotary-scaling": {"type": "yarn", "factor": 2, "original-max-position": 0}},
     "original-max-position must be a positive integer"),
])
def test_bad_scaling_gives_one_clear_error(values, message):
    with pytest.raises(NeoXArgsError) as err:
        NeoXArgs.from_dict({**BASE, **values})
    assert message in str(err.value)


def test_rotary_scaling_is_a_flat_key_with_nested_command_line_override(tmp_path):
    config = tmp_path / "a.yml"
    config.write_text("train-micro-batch-size-per-gpu: 1\npos-emb: rotary\n"
                      "rotary-scaling: {type: yarn, factor: 4, original-max-position: 128}\n")
    args = NeoXArgs.from_ymls([config], overrides={"rotary-scaling.factor": 8})
    assert args.rotary_scaling == {"type": "yarn", "factor": 8, "original-max-position": 128}
    assert NeoXArgs.from_dict({**BASE, "pos-emb": "alibi"}).rotary_scaling is None  # unset elsewhere: fine


@pytest.mark.parametrize("pct", [1.0, 0.5])
@pytest.mark.parametrize("factor,low,high", LLAMA3_CASES)
def test_llama3_frequencies_match_transformers(factor, low, high, pct):
    expected, attention = ROPE_INIT_FUNCTIONS["llama3"](llama3_hf(factor, low, high, pct), "cpu")
    got, got_attention = ours(llama3(factor, low, high), pct).frequencies()
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)
    assert got_attention == attention == 1.0


@pytest.mark.parametrize("pct", [1.0, 0.5])
@pytest.mark.parametrize("seq_len", [None, 1, ORIGINAL, ORIGINAL + 1, 4 * ORIGINAL, 32 * ORIGINAL])
@pytest.mark.parametrize("factor,attention", [(4.0, None), (16.0, None), (8.0, 1.3), (1.0, None)])
def test_longrope_frequencies_and_attention_factor_match_transformers_at_every_length(factor, attention, seq_len,
                                                                                     pct):
    expected, expected_attention = ROPE_INIT_FUNCTIONS["longrope"](longrope_hf(factor, pct, attention), "cpu",
                                                                   seq_len=seq_len)
    got, got_attention = ours(longrope(factor, pct, attention), pct).frequencies(seq_len)
    torch.testing.assert_close(got, expected, rtol=1e-6, atol=0)
    assert got_attention == pytest.approx(expected_attention, rel=1e-12)


@pytest.mark.parametrize("length", [ORIGINAL, ORIGINAL + 1, 4 * ORIGINAL, 32 * ORIGINAL])
@pytest.mark.parametrize("kind", ["llama3", "longrope"])
def test_llama3_and_longrope_rotate_as_llamas_rotary_embedding_at_every_position(kind, length):
    """A whole forward over `length` positions: Llama's rotary module (longrope picks its long factors once
    the largest position passes the original length) and its rotary application, against ours. float32
    angles up to 32 x 64 rad: the tolerance is that of the angle's rounding."""
    config = llama3_hf(8.0, 1.0, 4.0) if kind == "llama3" else longrope_hf(4.0)
    scaling = llama3(8.0, 1.0, 4.0) if kind == "llama3" else longrope(4.0)
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, HEADS, length, HEAD_DIM, dtype=torch.float32).unbind(0)
    positions = torch.arange(length)
    cos, sin = LlamaRotaryEmbedding(config)(q, positions[None])
    expected = apply_rotary_pos_emb(q, k, cos, sin)
    got = ours(scaling).rotate_qk(q, k, positions, positions)
    tolerance = 5e-5 * max(1, length / 200)
    for g, e in zip(got, expected):
        torch.testing.assert_close(g, e, rtol=1e-4, atol=tolerance)


def test_longrope_past_the_original_length_is_another_rotation_and_declares_its_cache_inexact():
    pe = ours(longrope(4.0))
    assert not pe.cache_exact and ours(llama3(8.0, 1.0, 4.0)).cache_exact
    short, _ = pe.frequencies(ORIGINAL)
    long, _ = pe.frequencies(ORIGINAL + 1)
    assert not torch.allclose(short, long)


def test_llama3_cached_generation_is_recompute_past_the_training_length():
    model = tiny_model("rotary", rotary_scaling={"type": "llama3", "factor": 4, "original-max-position": TRAIN_LENGTH,
                                                 "low-freq-factor": 1, "high-freq-factor": 4})
    new = 3 * TRAIN_LENGTH
    assert generate_tokens(model, PROMPTS, max_new_tokens=new) == \
        generate_tokens(model, PROMPTS, max_new_tokens=new, recompute=True)


def test_longrope_factors_of_the_wrong_length_name_the_pairs():
    with pytest.raises(NeoXArgsError, match=r"rotary-scaling short-factor has 3 numbers, but rotary rotates 32 dims "
                                            r"of each head \(head dim x rotary-pct\), 16 frequency pairs"):
        ours({"type": "longrope", "factor": 4, "short-factor": [1, 1, 1], "long-factor": [1, 1, 1]})
