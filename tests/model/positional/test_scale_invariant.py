"""`scale_invariant` (positional_embeddings/scale_invariant.py) against the paper's formula (Anson, Wang &
Aitchison 2025, arXiv 2505.17083, Section 3), written here in float64 from its general form:

    L_t = a_t * S_t + m_t,   a_t = sqrt(2 (log(t / tau + 1) - log alpha + beta / alpha)),   m_t = beta / alpha - a_t^2

with S_t = q . k / sqrt(D) the score of a key t tokens back (after RoPE, p-RoPE in the paper) and the paper's
boundary choice alpha = beta = e^(1/2) (a_0 = 1, m_0 = 0): on every attention path, in a whole model at 1x and 8x
the training length (each layer's attention replaced by the formula), through the KV cache and the Hugging Face
export; and the option's refusal."""
import math

import pytest
import torch
from tests.model.positional.formula_model import dot_products, logits_with_attention, softmax_attention
from tests.support.hf_export import TRAIN_LENGTH
from tests.support.generation import PROMPTS, assert_cache_matches_full_forward, tiny_model

from megatron.model.attention import AttentionRun, plan_attention
from megatron.model.attention.flex_kernel import reference_math
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.neox_arguments import NeoXArgs, NeoXArgsError

ALPHA = BETA = math.exp(0.5)


def paper_terms(t, tau):
    """(a_t, m_t) float64 from the general closed form above."""
    t = torch.as_tensor(t, dtype=torch.float64)
    a = (2 * (torch.log(t / tau + 1) - math.log(ALPHA) + BETA / ALPHA)).sqrt()
    return a, BETA / ALPHA - a ** 2


def p_rope(x, positions, unrotated_fraction, base=10000.0):
    """Rotate-half RoPE in float64 over all D dims, the lowest-frequency pairs (the last
    unrotated_fraction x D/2) left unrotated: p-RoPE with a whole number of pairs."""
    half = x.shape[-1] // 2
    inv_freq = base ** (-torch.arange(half, dtype=torch.float64) / half)
    inv_freq[half - round(unrotated_fraction * half):] = 0.0
    angles = positions.double()[:, None] * inv_freq
    x1, x2 = x[..., :half].double(), x[..., half:].double()
    return torch.cat([x1 * angles.cos() - x2 * angles.sin(), x2 * angles.cos() + x1 * angles.sin()], dim=-1)


def formula_attention(q, k, v, tau, unrotated_fraction=0.0, window=None):
    """The paper's attention, float64 [b, H, s, D]."""
    s = q.shape[2]
    positions = torch.arange(s)
    scores = dot_products(p_rope(q, positions, unrotated_fraction), p_rope(k, positions, unrotated_fraction),
                          q.shape[-1])
    a, m = paper_terms((positions[:, None] - positions[None, :]).clamp(min=0), tau)
    logits = a * scores + m
    if window is not None:
        logits = logits.masked_fill(positions[:, None] - positions[None, :] >= window, float("-inf"))
    return softmax_attention(logits, v)


def test_the_tables_are_the_papers_terms_and_leave_the_nearest_keys_alone():
    pe = build_positional_embedding("scale_invariant", num_heads=3, head_dim=8, scale_invariant_tau=10.0)
    bias, weight = pe.distance_tables(5000)
    a, m = paper_terms(torch.arange(5000), 10.0)
    for got in (bias, weight):
        assert got.shape == (3, 5000) and got.dtype == torch.float32
    torch.testing.assert_close(weight.double(), a.expand(3, -1), rtol=1e-7, atol=0)
    torch.testing.assert_close(bias.double(), m.expand(3, -1), rtol=1e-7, atol=1e-7)
    assert float(weight[0, 0]) == 1.0 and float(bias[0, 0]) == 0.0
    # At t = tau: a^2 = 1 + 2 log 2 (where the paper's ramp ends).
    assert float(weight[0, 10]) ** 2 == pytest.approx(1 + 2 * math.log(2), rel=1e-6)


@pytest.mark.parametrize("window", [None, 9])
@pytest.mark.parametrize("impl, needs_grad", [("auto", False), ("auto", True), ("sdpa", True), ("blocked", False),
                                              ("blocked", True), ("flex", False)])
def test_every_path_equals_the_paper_formula(impl, needs_grad, window):
    torch.manual_seed(0)
    pe = build_positional_embedding("scale_invariant", num_heads=3, head_dim=8, scale_invariant_tau=4.0,
                                    rotary_unrotated_fraction=0.5)
    q, k, v = (torch.randn(2, 3, 150, 8, requires_grad=needs_grad) for _ in range(3))
    plan = plan_attention(pe, torch.arange(150), AttentionRun(impl=impl, window=window, block_size=64,
                                                              needs_grad=needs_grad, dropout_p=0.0))
    with torch.set_grad_enabled(needs_grad), reference_math():
        ours = plan.attend(*plan.rotate(q, k), v, 0.0)
    expected = formula_attention(q.detach(), k.detach(), v.detach(), 4.0, 0.5, window)
    torch.testing.assert_close(ours.double().detach(), expected, atol=2e-5, rtol=1e-4)
    if needs_grad:  # the formula's gradients with respect to q, k and v, by autograd through it in float64
        cotangent = torch.randn_like(ours)
        grads = torch.autograd.grad((ours * cotangent).sum(), (q, k, v))
        wide = [t.detach().double().requires_grad_() for t in (q, k, v)]
        expected_grads = torch.autograd.grad((formula_attention(*wide, 4.0, 0.5, window) * cotangent.double()).sum(),
                                             wide)
        for got, want in zip(grads, expected_grads):
            torch.testing.assert_close(got.double(), want, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("factor", [1, 8])
def test_model_logits_equal_the_formulas_at_1x_and_8x_the_training_length(factor, monkeypatch):
    model = tiny_model("scale_invariant", attention_impl="auto", scale_invariant_tau=3.0,
                       rotary_unrotated_fraction=0.5).double()
    ids = torch.randint(0, 256, (2, factor * TRAIN_LENGTH), generator=torch.Generator().manual_seed(factor))
    with torch.no_grad():
        ours = model(ids)
        theirs = logits_with_attention(model, ids, lambda q, k, v, plan: formula_attention(q, k, v, 3.0, 0.5),
                                       monkeypatch)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0)


def test_cached_generation_equals_a_full_forward_with_a_window():
    assert_cache_matches_full_forward(tiny_model("scale_invariant", scale_invariant_tau=2.0, attention_window=6),
                                      PROMPTS, 20)


def test_a_tau_that_is_not_positive_is_one_paragraph():
    with pytest.raises(NeoXArgsError, match=r"scale-invariant-tau: must be a positive number \(tokens\), got 0"):
        NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, "pos-emb": "scale_invariant",
                            "scale-invariant-tau": 0})


def test_tau_under_another_method_is_refused_and_names_the_runs_trained_with_it():
    with pytest.raises(NeoXArgsError, match=r"scale-invariant-tau: is set, but pos-emb is 'alibi', which has no such "
                                            r"option \(only scale_invariant does\)"):
        NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, "pos-emb": "alibi", "scale-invariant-tau": 3.0})
    from megatron.evaluation.identity import evaluation_variant
    base = {"train-micro-batch-size-per-gpu": 1, "pos-emb": "scale_invariant"}
    assert evaluation_variant(NeoXArgs.from_dict(base)) is None
    assert evaluation_variant(NeoXArgs.from_dict(base | {"scale-invariant-tau": 3.0})) == "tau=3.0"
