"""`cable` (positional_embeddings/cable.py) against CABLE's formula written out here in float64 from the
paper and its released code (github.com/axiomlab/Cable, src/Cable.py, read for the facts, not copied):
    b_t = sum_{l<=t} -softplus(w_h . x_l + c_h),   logits(i, j) = q_i . k_j * scale + b_i - b_j  (j <= i),
scale = 1/sqrt(D) (the paper's formula, the default) or 1 (the released code: `cable-unscaled-scores`),
as explicit sums, on every attention path; the released initialisation; the KV cache against a full
forward; the Hugging Face export; the config's refusals; training and evaluating at 4x."""
import math

import pytest
import torch
from tests.support.generation import PROMPTS, assert_cache_matches_full_forward, tiny_model

from megatron.model.attention import AttentionRun, plan_attention
from megatron.model.attention.flex_kernel import reference_math
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.neox_arguments import NeoXArgs, NeoXArgsError

H, D = 3, 8


def cable(unscaled=False, seed=0):
    torch.manual_seed(seed)
    pe = build_positional_embedding("cable", num_heads=H, head_dim=D, hidden_size=H * D,
                                    cable_unscaled_scores=unscaled)
    with torch.no_grad():  # off the initial values: strong and weak gates, heads differ
        pe.bias_weight.normal_(0, 0.5)
        pe.bias_offset.copy_(torch.randn(H) * 2)
    return pe


def formula(q, k, v, x, pe, unscaled=False, window=None, gradients=False):
    """float64 [b, H, L, D], the bias as an explicit sum over l = j+1..i of -softplus(w_h . x_l + c_h);
    differentiable in w and c when `gradients`."""
    q, k, v, x = (t.double() for t in (q, k, v, x))
    w, c = pe.bias_weight.double(), pe.bias_offset.double()
    if not gradients:
        w, c = w.detach(), c.detach()
    b, heads, length, d = q.shape
    step = -torch.nn.functional.softplus(torch.einsum("bld,hd->bhl", x, w) + c[None, :, None])  # [b, H, L]
    out = torch.zeros(b, heads, length, d, dtype=torch.float64)
    scale = 1.0 if unscaled else 1 / math.sqrt(d)
    for i in range(length):
        keys = [j for j in range(i + 1) if window is None or i - j < window]
        for n in range(b):
            for h in range(heads):
                logits = torch.stack([q[n, h, i] @ k[n, h, j] * scale + step[n, h, j + 1:i + 1].sum()
                                      for j in keys])
                out[n, h, i] = logits.softmax(0) @ v[n, h, keys]
    return out


@pytest.mark.parametrize("window", [None, 9])
@pytest.mark.parametrize("unscaled", [False, True], ids=["paper", "released"])
@pytest.mark.parametrize("impl,needs_grad", [("auto", False), ("auto", True), ("sdpa", True), ("blocked", False),
                                             ("flex", False)])
def test_every_path_equals_the_float64_formula(impl, needs_grad, unscaled, window):
    pe = cable(unscaled)
    b, length = 2, 40
    torch.manual_seed(1)
    x = torch.randn(b, length, H * D)
    q, k, v = (torch.randn(b, H, length, D) for _ in range(3))
    with torch.set_grad_enabled(needs_grad), reference_math():
        plan = plan_attention(pe, torch.arange(length), AttentionRun(impl=impl, window=window, block_size=16,
                                                                     needs_grad=needs_grad, dropout_p=0.0))
        layer = plan.with_layer(pe.layer_values(x))
        ours = layer.attend(*layer.rotate(q, k), v, 0.0)
    expected = formula(q, k, v, x, pe, unscaled, window)
    torch.testing.assert_close(ours.detach().double(), expected, rtol=0, atol=2e-5)
    # The other scale gives another answer: the option is applied, not dropped.
    assert (formula(q, k, v, x, pe, not unscaled, window) - expected).abs().max() > 1e-2


def test_gradients_of_the_gate_equal_the_float64_formulas():
    pe = cable()
    torch.manual_seed(2)
    x = torch.randn(1, 30, H * D)
    q, k, v = (torch.randn(1, H, 30, D) for _ in range(3))
    plan = plan_attention(pe, torch.arange(30), AttentionRun(impl="auto", window=None, block_size=16, needs_grad=True,
                                                             dropout_p=0.0))
    layer = plan.with_layer(pe.layer_values(x))
    cotangent = torch.randn(1, H, 30, D)
    (layer.attend(*layer.rotate(q, k), v, 0.0) * cotangent).sum().backward()
    reference = cable().double()
    (formula(q, k, v, x, reference, gradients=True) * cotangent.double()).sum().backward()
    for ours, theirs in ((pe.bias_weight, reference.bias_weight), (pe.bias_offset, reference.bias_offset)):
        torch.testing.assert_close(ours.grad.double(), theirs.grad, rtol=1e-4, atol=1e-5)


def test_the_released_initialisation():
    """The released code's Linear(n_embd, n_head): weight N(0, 0.02), bias zeros (its _init_weights)."""
    torch.manual_seed(0)
    pe = build_positional_embedding("cable", num_heads=4, head_dim=64, hidden_size=256)
    assert torch.equal(pe.bias_offset.detach(), torch.zeros(4))
    assert abs(float(pe.bias_weight.detach().std()) - 0.02) < 0.002
    torch.testing.assert_close(pe.token_terms(torch.zeros(1, 3, 256)).detach(), torch.full((1, 4, 3), -math.log(2)))


def test_cached_generation_with_a_window_equals_a_full_forward():
    assert_cache_matches_full_forward(tiny_model("cable", attention_window=5), PROMPTS, 20)
    assert_cache_matches_full_forward(tiny_model("cable", cable_unscaled_scores=True), PROMPTS, 20)


def test_one_gate_per_layer_and_it_learns():
    model = tiny_model("cable", num_layers=3, attention_impl="auto")
    assert len(model.pos_embs) == 3 and model.layer_module == [0, 1, 2]
    model.train()
    model(torch.randint(0, 258, (2, 20))).square().mean().backward()
    assert all(pe.bias_weight.grad is not None and pe.bias_weight.grad.abs().sum() > 0 for pe in model.pos_embs)


def test_a_bad_value_is_one_paragraph():
    with pytest.raises(NeoXArgsError, match=r"cable-unscaled-scores must be true or false, got 'yes' \(str\)"):
        NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, "pos-emb": "cable", "cable-unscaled-scores": "yes"})
