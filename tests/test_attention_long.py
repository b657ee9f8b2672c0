"""Long-context evaluation: the calls the `blocked` path makes past a few thousand tokens without
gradients (megatron/model/attention/toeplitz.py) give the float64 reference's answer."""
import math

import pytest
import torch

from megatron.model.attention import attend, plan_attention, toeplitz
from megatron.model.positional_embeddings import build_positional_embedding

HEADS, HEAD_DIM = 4, 8


def float64_reference(pe, q, k, v, window, block=512):
    """softmax(q.k / sqrt(D) + bias) . v in float64 over keys j <= i (i - j < window), a query block
    at a time (never an L x L tensor), from the method's own pe.bias."""
    length = q.shape[2]
    bias = pe.bias(length, length)  # [H, L, L] at these test sizes
    outputs = []
    for start in range(0, length, block):
        end = min(start + block, length)
        scores = q[:, :, start:end].double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
        if bias is not None:
            scores = scores + bias[:, start:end].double()
        i, j = torch.arange(start, end)[:, None], torch.arange(length)[None, :]
        visible = (j <= i) & (True if window is None else i - j < window)
        outputs.append(scores.masked_fill(~visible, float("-inf")).softmax(-1) @ v.double())
    return torch.cat(outputs, dim=2)


def run_blocked(pe, q, k, v, window, positions):
    with torch.no_grad():
        plan = plan_attention(pe, positions, impl="blocked", window=window, block_size=64, needs_grad=False,
                              dropout_p=0.0)
        assert plan.name == "toeplitz"
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
