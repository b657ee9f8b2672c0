"""`rotary-unrotated-fraction` (p-RoPE, arXiv 2410.06205) against transformers' `proportional` rope (its
frequencies, p = 1 - u) and a float64 rotation written here: of the d rotated dims' d/2 frequency pairs
(rotate-half layout: pair i is dims i and i + d/2), the highest floor(p d/2) keep plain RoPE's base^(-2i/d)
and the rest frequency 0; not rotary-pct; the config's errors; cached generation equals recompute."""
import math

import pytest
import torch
from tests.support.generation import PROMPTS, TRAIN_LENGTH, tiny_model

from megatron.model.positional_embeddings import build_positional_embedding
from megatron.model.positional_embeddings.base import PositionalEmbeddingError
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.text_generation import generate_tokens

HEADS, HEAD_DIM, BASE = 2, 16, 10000


def p_rope(fraction, pct=1.0):
    return build_positional_embedding("rotary", HEADS, HEAD_DIM, HEADS * HEAD_DIM, rotary_pct=pct,
                                      rotary_unrotated_fraction=fraction)


def proportional_frequencies(fraction, dims):
    """transformers' `proportional` rope (p-RoPE) over `dims` rotated dims, rotating the fraction p = 1 - u (as a
    user writes p: 0.1, not 1 - 0.9 = 0.09999999999999998)."""
    from transformers import PretrainedConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    config = PretrainedConfig(hidden_size=dims, num_attention_heads=1, head_dim=dims, rope_parameters={
        "rope_type": "proportional", "rope_theta": float(BASE), "partial_rotary_factor": round(1 - fraction, 9)})
    return ROPE_INIT_FUNCTIONS["proportional"](config, "cpu")[0]


def formula(x, positions, fraction, pct=1.0):
    """float64: x [b, H, s, D] with its first d = D pct dims rotated pair by pair, as many of the highest
    frequencies as transformers' proportional rope keeps; the rest (the last pairs) not at all."""
    x = x.double().clone()
    d = int(HEAD_DIM * pct)
    half = d // 2
    kept = int((proportional_frequencies(fraction, d) > 0).sum())
    out = x.clone()
    for i in range(half):
        theta = BASE ** (-2 * i / d) if i < kept else 0.0
        for s, p in enumerate(positions.tolist()):
            c, sn = math.cos(p * theta), math.sin(p * theta)
            a, b = x[..., s, i], x[..., s, i + half]
            out[..., s, i], out[..., s, i + half] = a * c - b * sn, b * c + a * sn
    return out


@pytest.mark.parametrize("pct", [1.0, 0.5])
@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75, 0.3, 0.1])
def test_the_rotation_equals_the_float64_formula(fraction, pct):
    torch.manual_seed(0)
    q, k = torch.randn(2, 1, HEADS, 40, HEAD_DIM).unbind(0)
    positions = torch.cat([torch.arange(20), torch.arange(20) * 37 + 100])  # to 32x the 40 here
    got_q, got_k = p_rope(fraction, pct).rotate_qk(q, k, positions, positions)
    torch.testing.assert_close(got_q.double(), formula(q, positions, fraction, pct), atol=5e-4, rtol=1e-4)
    torch.testing.assert_close(got_k.double(), formula(k, positions, fraction, pct), atol=5e-4, rtol=1e-4)


def test_the_unrotated_pairs_carry_no_position_and_it_is_not_rotary_pct():
    torch.manual_seed(0)
    q = torch.randn(1, HEADS, 50, HEAD_DIM)
    positions = torch.arange(50) * 11
    rotated, _ = p_rope(0.5).rotate_qk(q, q, positions, positions)
    half = HEAD_DIM // 2
    unrotated = list(range(half // 2, half)) + list(range(half + half // 2, HEAD_DIM))
    assert torch.equal(rotated[..., unrotated], q[..., unrotated])
    # rotary-pct 0.5 also rotates half the dims, but across the whole frequency range (down to the lowest)
    half_pct, _ = p_rope(0.0, 0.5).rotate_qk(q, q, positions, positions)
    assert not torch.allclose(half_pct, rotated)
    assert torch.equal(p_rope(0.0).rotate_qk(q, q, positions, positions)[0],
                       build_positional_embedding("rotary", HEADS, HEAD_DIM, HEADS * HEAD_DIM).rotate_qk(
                           q, q, positions, positions)[0])


@pytest.mark.parametrize("dims", [16, 20, 64])
@pytest.mark.parametrize("fraction", [0.1, 0.25, 0.3, 0.33, 0.5, 0.7, 0.8])
def test_the_frequencies_are_transformers_proportional_rope(fraction, dims):
    """A fraction that is not a whole number of pairs (0.1 of 8, 0.3 of 10) unrotates one pair more than
    floor(u d/2): the paper keeps floor(p d/2) rotated, p = 1 - u."""
    got, _ = build_positional_embedding("rotary", 1, dims, dims, rotary_unrotated_fraction=fraction).frequencies()
    torch.testing.assert_close(got, proportional_frequencies(fraction, dims), rtol=1e-6, atol=0)


def test_a_fraction_that_rotates_nothing_is_refused_with_the_numbers():
    with pytest.raises(PositionalEmbeddingError, match=r"rotary-unrotated-fraction 0.9 of 8 rotated frequency pairs "
                                                       r"leaves none rotated \(floor\(0.1 x 8\) = 0\), which is no "
                                                       r"positional encoding at all; set at most 0.875, or use "
                                                       r"`pos-emb: none`"):
        p_rope(0.9)
    p_rope(0.875)  # one pair rotated


@pytest.mark.parametrize("values,message", [
    ({"rotary-unrotated-fraction": 1.0}, "rotary-unrotated-fraction: must be a number in [0, 1)"),
    ({"rotary-unrotated-fraction": "half"}, "rotary-unrotated-fraction must be a number, got 'half' (str)"),
    ({"pos-emb": "alibi", "rotary-unrotated-fraction": 0.5},
     "rotary-unrotated-fraction: is set, but pos-emb is 'alibi', which has no such option (only rotary and "
     "scale_invariant do)"),
])
def test_bad_values_are_one_paragraph(values, message):
    with pytest.raises(NeoXArgsError) as err:
        NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, "pos-emb": "rotary", **values})
    assert message in str(err.value)


def test_results_never_share_the_plain_rotary_row():
    from megatron.evaluation.identity import evaluation_variant
    base = {"train-micro-batch-size-per-gpu": 1, "pos-emb": "rotary"}
    assert evaluation_variant(NeoXArgs.from_dict(base)) is None
    assert evaluation_variant(NeoXArgs.from_dict({**base, "rotary-unrotated-fraction": 0.25})) == "prope0.75"


def test_cached_generation_is_recompute_to_4x():
    model = tiny_model("rotary", rotary_pct=1.0, rotary_unrotated_fraction=0.5)
    new = 3 * TRAIN_LENGTH
    assert generate_tokens(model, PROMPTS, max_new_tokens=new) == \
        generate_tokens(model, PROMPTS, max_new_tokens=new, recompute=True)
