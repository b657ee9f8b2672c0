"""`pope` (positional_embeddings/pope.py) against x-transformers' PolarEmbedding and apply_polar_pos_emb
(requirements-dev.txt pins it), forward and backward, and against the paper's score written out here in float64,

    score(i, j) = sum_c softplus(q_ic) softplus(k_jc) cos((i - j) theta_c - delta_hc) / sqrt(D),  theta_c = 10000^(-c/D)

(x-transformers' convention: delta added to the keys' phases, clamped into [-2 pi, 0]) on every attention path,
forward and gradients; a whole model at 1x and 8x the training length with every layer's attention computed by
that formula; the KV cache with a window; the Hugging Face export; the uniform initialisation of the phase bias.

Conventions mapped here, not in the method: apply_polar_pos_emb computes in float32 whatever it is given
(`t.float()`), so the comparison with it holds to float32's rounding, and the float64 checks are the formula's.
x-transformers keeps its frequencies as a float32 buffer; the reference's buffer is set to the same formula in
float64. Its q and k leave with 2D dims and are scaled by 1/sqrt(D); ours leave q times sqrt(2), since attention
here divides by the square root of q's dims (2D)."""
import math

import pytest
import torch
from tests.model.positional.formula_model import logits_with_attention, softmax_attention
from tests.support.hf_export import TRAIN_LENGTH
from tests.support.generation import PROMPTS, assert_cache_matches_full_forward, tiny_model
from x_transformers.x_transformers import PolarEmbedding, apply_polar_pos_emb

from megatron.model.attention import AttentionRun, plan_attention
from megatron.model.attention.flex_kernel import reference_math
from megatron.model.positional_embeddings import build_positional_embedding

H, D = 3, 8


def theirs(bias, base=10000):
    """x-transformers' PolarEmbedding with this phase bias [H, D] (its learned_bias [H, 1, D])."""
    polar = PolarEmbedding(bias.shape[-1], bias.shape[0], base=base).double()
    polar.inv_freq = 1.0 / base ** (torch.arange(bias.shape[-1], dtype=torch.float64) / bias.shape[-1])
    with torch.no_grad():
        polar.learned_bias.copy_(bias[:, None, :])
    return polar


def formula_attention(q, k, v, bias, window=None):
    """The paper's attention (the module docstring's score, a causal softmax) in float64 [b, H, s, D]; bias [H, D]
    the unclamped phase bias."""
    s, d = q.shape[2], q.shape[-1]
    i = torch.arange(s, dtype=torch.float64)
    theta = 10000.0 ** (-torch.arange(d, dtype=torch.float64) / d)
    delta = bias.double().clamp(-2 * math.pi, 0.0)  # [H, D]
    phase = (i[:, None] - i[None, :])[None, :, :, None] * theta - delta[:, None, None, :]  # [H, s, s, D]
    mq, mk = torch.nn.functional.softplus(q.double()), torch.nn.functional.softplus(k.double())
    scores = torch.einsum("bhic,bhjc,hijc->bhij", mq, mk, phase.cos()) / math.sqrt(d)
    if window is not None:
        scores = scores.masked_fill(i[:, None] - i[None, :] >= window, float("-inf"))
    return softmax_attention(scores, v)


def pope(seed=0):
    torch.manual_seed(seed)
    pe = build_positional_embedding("pope", num_heads=H, head_dim=D, pope_bias_uniform_init=True).double()
    with torch.no_grad():  # two entries outside [-2 pi, 0], where the clamp holds them (and passes no gradient)
        pe.phase_bias[0, 1], pe.phase_bias[2, 5] = 0.7, -7.0
    return pe


def test_the_transform_and_its_gradients_equal_x_transformers():
    pe = pope()
    s = 37
    q, k = (torch.randn(2, H, s, D, dtype=torch.float64, requires_grad=True) for _ in range(2))
    positions = torch.arange(s)
    ours_q, ours_k = pe.rotate_qk(q, k, positions, positions)
    freqs, _ = theirs(pe.phase_bias.detach())(positions)
    bias = pe.phase_bias.clamp(-2 * math.pi, 0.0)[:, None, :]  # their forward's clamp, on the bias we share
    their_q, their_k = apply_polar_pos_emb(q, freqs), apply_polar_pos_emb(k, freqs + bias)
    torch.testing.assert_close(ours_q / math.sqrt(2), their_q, rtol=1e-6, atol=1e-6)  # theirs: float32 inside
    torch.testing.assert_close(ours_k, their_k, rtol=1e-6, atol=1e-6)
    cotangents = torch.randn_like(ours_q), torch.randn_like(ours_k)
    ours = torch.autograd.grad((ours_q / math.sqrt(2) * cotangents[0]).sum() + (ours_k * cotangents[1]).sum(),
                               (q, k, pe.phase_bias))
    expected = torch.autograd.grad((their_q * cotangents[0]).sum() + (their_k * cotangents[1]).sum(),
                                   (q, k, pe.phase_bias))
    for got, want in zip(ours, expected):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert ours[2][0, 1] == 0 and ours[2][2, 5] == 0  # the entries outside [-2 pi, 0]: clamped, as theirs
    # And their scores, scaled by 1/sqrt(D), are ours scaled by 1/sqrt(2D), attention's for our 2D dims.
    torch.testing.assert_close(ours_q @ ours_k.transpose(-1, -2) / math.sqrt(2 * D),
                               their_q @ their_k.transpose(-1, -2) / math.sqrt(D), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("window", [None, 9])
@pytest.mark.parametrize("impl, needs_grad", [("auto", False), ("sdpa", True), ("sdpa", False), ("blocked", True),
                                              ("blocked", False), ("flex", False)])
def test_every_path_equals_the_float64_formula(impl, needs_grad, window):
    pe = pope(seed=1)
    q, k, v = (torch.randn(2, H, 150, D, dtype=torch.float64, requires_grad=needs_grad) for _ in range(3))
    plan = plan_attention(pe, torch.arange(150), AttentionRun(impl=impl, window=window, block_size=64,
                                                              needs_grad=needs_grad, dropout_p=0.0,
                                                              dtype=torch.float64))
    with torch.set_grad_enabled(needs_grad), reference_math():
        ours = plan.attend(*plan.rotate(q, k), v, 0.0)
        expected = formula_attention(q, k, v, pe.phase_bias if needs_grad else pe.phase_bias.detach(), window)
    torch.testing.assert_close(ours, expected, atol=1e-12, rtol=1e-10)
    if needs_grad:
        cotangent = torch.randn_like(ours)
        for got, want in zip(torch.autograd.grad((ours * cotangent).sum(), (q, k, v, pe.phase_bias)),
                             torch.autograd.grad((expected * cotangent).sum(), (q, k, v, pe.phase_bias))):
            torch.testing.assert_close(got, want, atol=1e-11, rtol=1e-10)


@pytest.mark.parametrize("factor", [1, 8])
def test_model_logits_equal_the_formulas_at_1x_and_8x_the_training_length(factor, monkeypatch):
    model = tiny_model("pope", attention_impl="auto").double()
    ids = torch.randint(0, 256, (2, factor * TRAIN_LENGTH), generator=torch.Generator().manual_seed(factor))
    with torch.no_grad():
        ours = model(ids)
        expected = logits_with_attention(
            model, ids, lambda q, k, v, plan: formula_attention(q, k, v, plan.pe.phase_bias), monkeypatch)
    torch.testing.assert_close(ours, expected, atol=1e-10, rtol=0)


def test_cached_generation_equals_a_full_forward_with_a_window():
    assert_cache_matches_full_forward(tiny_model("pope", attention_window=6), PROMPTS, 20)


def test_the_phase_bias_starts_at_zero_or_uniform_in_its_range():
    assert not build_positional_embedding("pope", num_heads=H, head_dim=D).phase_bias.any()
    torch.manual_seed(0)
    bias = build_positional_embedding("pope", num_heads=H, head_dim=D, pope_bias_uniform_init=True).phase_bias
    assert bias.min() >= -2 * math.pi and bias.max() <= 0 and bias.unique().numel() == H * D


def test_its_option_under_another_method_is_refused():
    from megatron.neox_arguments import NeoXArgs, NeoXArgsError
    with pytest.raises(NeoXArgsError, match=r"pope-bias-uniform-init: is set, but pos-emb is 'rotary', which has no "
                                            r"such option \(only pope does\)"):
        NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, "pos-emb": "rotary", "pope-bias-uniform-init": True})
