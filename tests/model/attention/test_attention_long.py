"""Long-context evaluation: what the `blocked` path does without gradients on CPU
(megatron/model/attention/toeplitz.py) gives the float64 reference's answer: the flash kernel's
long calls past a few thousand tokens, and the written-out softmax of a method with a weight."""
import math

import pytest
import torch

from megatron.model.attention import AttentionRun, attend, plan_attention, toeplitz
from megatron.model.attention.weighted_table_attention import FORWARD_BLOCK
from megatron.model.positional_embeddings import build_positional_embedding

HEADS, HEAD_DIM = 4, 8


def float64_reference(pe, q, k, v, window, block=512):
    """softmax(q.k / sqrt(D) + bias) . v in float64 over keys j <= i (i - j < window), a query block
    at a time (never an L x L scores tensor), from the method's own pe.bias and pe.weight."""
    length = q.shape[2]
    bias, weight = pe.bias(length, length), pe.weight(length, length)  # [H, L, L] at these test sizes
    outputs = []
    for start in range(0, length, block):
        end = min(start + block, length)
        scores = q[:, :, start:end].double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
        if weight is not None:
            scores = scores * weight[:, start:end].double()
        if bias is not None:
            scores = scores + bias[:, start:end].double()
        i, j = torch.arange(start, end)[:, None], torch.arange(length)[None, :]
        visible = (j <= i) & (True if window is None else i - j < window)
        outputs.append(scores.masked_fill(~visible, float("-inf")).softmax(-1) @ v.double())
    return torch.cat(outputs, dim=2)


def run_blocked(pe, q, k, v, window, positions, strategy="toeplitz"):
    with torch.no_grad():
        plan = plan_attention(pe, positions, AttentionRun(impl="blocked", window=window, block_size=64,
                                                          needs_grad=False, dropout_p=0.0, dtype=q.dtype))
        assert plan.name == strategy
        return attend(q, k, v, plan)


def inputs(length, heads=HEADS, head_dim=HEAD_DIM):
    torch.manual_seed(1)
    return [2 * torch.randn(2, heads, length, head_dim) for _ in range(3)]


@pytest.mark.parametrize("window", [None, 1, 30, 500])
@pytest.mark.parametrize("name", ["kerple_log", "alibi", "t5", "none"])
def test_long_calls_match_the_float64_reference(name, window, monkeypatch):
    # The long calls made small: 200 tokens are four calls of 48 queries and a partial one.
    monkeypatch.setattr(toeplitz, "LONG_FROM", 100)
    monkeypatch.setattr(toeplitz, "LONG_BLOCK", 48)
    assert toeplitz.query_block(200, needs_grad=False) == 48 and toeplitz.query_block(200, needs_grad=True) == 128
    torch.manual_seed(0)
    pe = build_positional_embedding(name, num_heads=HEADS, head_dim=HEAD_DIM, hidden_size=HEADS * HEAD_DIM)
    q, k, v = inputs(200)
    out = run_blocked(pe, q, k, v, window, torch.arange(200) + 9)
    torch.testing.assert_close(out.double(), float64_reference(pe, q, k, v, window), atol=1e-5, rtol=1e-5)  # fp32 against float64 (the `sdpa` path: 3e-6)


def test_the_block_grows_only_without_gradients_and_past_long_from():
    assert toeplitz.query_block(toeplitz.LONG_FROM - 1, needs_grad=False) == toeplitz.TOEPLITZ_BLOCK
    assert toeplitz.query_block(toeplitz.LONG_FROM, needs_grad=False) == toeplitz.LONG_BLOCK
    assert toeplitz.query_block(10**6, needs_grad=True) == toeplitz.TOEPLITZ_BLOCK
    assert toeplitz.LONG_BLOCK >= 768  # the kernel's 256-query tiles (toeplitz.py)


@pytest.mark.slow
@pytest.mark.parametrize("window", [None, 1000])
@pytest.mark.parametrize("name", ["kerple_log", "alibi"])
def test_long_calls_at_their_real_size_match_the_float64_reference(name, window):
    # 4500 tokens: five calls of 768 queries and a partial one, at the sizes evaluation uses them.
    length = 4500
    assert length >= toeplitz.LONG_FROM and length % toeplitz.LONG_BLOCK
    torch.manual_seed(0)
    pe = build_positional_embedding(name, num_heads=2, head_dim=16, hidden_size=32)
    q, k, v = inputs(length, heads=2, head_dim=16)
    out = run_blocked(pe, q[:1], k[:1], v[:1], window, torch.arange(length))
    expected = float64_reference(pe, q[:1], k[:1], v[:1], window)
    torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=1e-5)  # fp32 against float64 (the `sdpa` path: 3e-6)


def make_weighted(heads=HEADS, head_dim=HEAD_DIM):
    torch.manual_seed(0)
    pe = build_positional_embedding("kerple_bias_weight", num_heads=heads, head_dim=head_dim,
                                    hidden_size=heads * head_dim)
    with torch.no_grad():  # off the initial values, so that the weight is not ~1 everywhere
        for p in pe.parameters():
            p.add_(0.3 * torch.rand_like(p))
    return pe


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("window", [None, 1, 30, 500])
def test_a_weight_written_out_from_strided_rows_matches_the_float64_reference(window, dtype):
    # 150 tokens: whole blocks of FORWARD_BLOCK queries and a partial one, positions not from 0.
    length = 150
    assert length > 2 * FORWARD_BLOCK and length % FORWARD_BLOCK
    pe = make_weighted()
    q, k, v = (t.to(dtype) for t in inputs(length))
    out = run_blocked(pe, q, k, v, window, torch.arange(length) + 3, strategy="toeplitz_written_out")
    assert out.dtype == dtype
    tolerance = {"atol": 1e-5, "rtol": 1e-5} if dtype == torch.float32 else {"atol": 1e-12, "rtol": 1e-10}
    torch.testing.assert_close(out.double(), float64_reference(pe, q, k, v, window), **tolerance)


def test_a_weight_with_gaps_still_gathers_its_blocks_and_with_gradients_takes_its_rows_too():
    pe, positions = make_weighted(), torch.arange(100)
    plan = plan_attention(pe, positions, AttentionRun(impl="blocked", window=None, block_size=64, needs_grad=True,
                                                      dropout_p=0.0))
    assert plan.name == "toeplitz_weighted_table_gradient"  # its gradients: tests/model/attention/test_table_gradient.py
    with torch.no_grad():
        plan = plan_attention(pe, positions * 2, AttentionRun(impl="blocked", window=None, block_size=64,
                                                              needs_grad=False, dropout_p=0.0))
    assert plan.name == "blocked"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("window", [None, 1, 30])
def test_a_weight_with_gradients_from_strided_rows_matches_float64_autograd(window, dtype):
    """toeplitz_weighted_table_gradient (training kerple_bias_weight): the output and every gradient (q, k,
    v and the four kernel parameters through both tables) against float64 autograd through the written-out
    reference, at 150 tokens from position 3: whole forward and backward blocks and a partial one."""
    length = 150
    assert length % FORWARD_BLOCK and length > 2 * FORWARD_BLOCK
    pe = make_weighted()
    q, k, v = (t.to(dtype).requires_grad_() for t in inputs(length))
    plan = plan_attention(pe, torch.arange(length) + 3, AttentionRun(impl="auto", window=window, block_size=64,
                                                                     needs_grad=True, dropout_p=0.0, dtype=dtype))
    assert plan.name == "toeplitz_weighted_table_gradient"
    out = attend(q, k, v, plan)
    torch.manual_seed(2)
    grad_out = torch.randn(out.shape, dtype=torch.float64)
    out.backward(grad_out.to(out.dtype))
    got = [out.detach().double()] + [t.grad.double() for t in (q, k, v)] + [p.grad.double() for p in pe.parameters()]
    pe.zero_grad()
    leaves = [t.detach().double().requires_grad_() for t in (q, k, v)]  # the same (rounded) inputs
    expected = float64_reference(pe, *leaves, window)
    expected.backward(grad_out)
    expected = [expected.detach()] + [t.grad for t in leaves] + [p.grad.double() for p in pe.parameters()]
    assert len(got) == len(expected) == 8
    # fp32: the kernel parameters' tables are float32 on either side; bf16: the output is rounded to bf16.
    tolerance = {"atol": 1e-4, "rtol": 1e-4} if dtype == torch.float32 else {"atol": 5e-2, "rtol": 2e-2}
    for name, g, e in zip(["out", "dq", "dk", "dv"] + [n for n, _ in pe.named_parameters()], got, expected):
        torch.testing.assert_close(g, e, **tolerance, msg=lambda m: f"{name}: {m}")
