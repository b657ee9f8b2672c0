"""`xpos` against rotary-embedding-torch (requirements-dev.txt pins it; its `use_xpos` follows
torchscale's XPOS), forward and gradients; its scores against a float64 formula; and the KV cache
against a full forward with the decay strong enough to matter.

Conventions mapped here, not in the method: rotary-embedding-torch rotates interleaved pairs
(dims 2k, 2k+1) where this project rotates dims k and k + r/2 (rotate-half), so q and k are permuted
into its layout and back; it centres positions on each forward (scale zeta^((n - L//2)/B)) where this
project uses n itself (so the KV cache can keep keys as scaled), so its q is multiplied by
zeta^((L//2)/B) and its k by zeta^(-(L//2)/B): constant factors that cancel in q.k.
"""
import math

import pytest
import torch
from rotary_embedding_torch import RotaryEmbedding
from tests.support.generation import PROMPTS, assert_cache_matches_full_forward, tiny_model

from megatron.model.positional_embeddings import PositionalEmbeddingError, build_positional_embedding

H, D = 3, 16


def zeta(r: int) -> torch.Tensor:
    """The paper's zeta_k = (2k/r + 0.4) / 1.4, k = 0..r/2-1, float64."""
    return (2 * torch.arange(r // 2, dtype=torch.float64) / r + 0.4) / 1.4


def reference(q, k, rotary_dims: int, scale_base: int):
    """rotary-embedding-torch's xPos in this project's layout and offset (see the module docstring)."""
    half, length = rotary_dims // 2, q.shape[2]
    interleaved = torch.stack([torch.arange(half), torch.arange(half, rotary_dims)], dim=1).flatten()
    order = torch.cat([interleaved, torch.arange(rotary_dims, q.shape[-1])])  # ours -> theirs
    back = torch.argsort(order)
    rotary = RotaryEmbedding(dim=rotary_dims, use_xpos=True, xpos_scale_base=scale_base, cache_if_possible=False)
    q_ref, k_ref = rotary.rotate_queries_and_keys(q[..., order], k[..., order])
    shift = (zeta(rotary_dims) ** ((length // 2) / scale_base)).repeat(2).float()  # [r]
    ones = torch.ones(q.shape[-1] - rotary_dims)
    return (q_ref[..., back] * torch.cat([shift, ones]), k_ref[..., back] * torch.cat([1 / shift, ones]))


@pytest.mark.parametrize("rotary_pct, scale_base, length", [(1.0, 512, 40), (1.0, 16, 48), (0.5, 8, 33)])
def test_forward_and_gradients_match_rotary_embedding_torch(rotary_pct, scale_base, length):
    torch.manual_seed(0)
    pe = build_positional_embedding("xpos", num_heads=H, head_dim=D, rotary_pct=rotary_pct,
                                    xpos_scale_base=scale_base)
    q = torch.randn(2, H, length, D, requires_grad=True)
    k = torch.randn(2, H, length, D, requires_grad=True)
    cotangents = torch.randn(2, H, length, D), torch.randn(2, H, length, D)
    positions = torch.arange(length)
    outputs = {"ours": pe.rotate_qk(q, k, positions, positions),
               "theirs": reference(q, k, int(D * rotary_pct), scale_base)}
    grads = {}
    for name, (q_out, k_out) in outputs.items():
        grads[name] = torch.autograd.grad((q_out * cotangents[0]).sum() + (k_out * cotangents[1]).sum(), (q, k))
    for ours, theirs in [*zip(outputs["ours"], outputs["theirs"]), *zip(grads["ours"], grads["theirs"])]:
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    # The scores need neither mapping: the offset cancels in q.k, and so does the same permutation of q and k.
    half, r = int(D * rotary_pct) // 2, int(D * rotary_pct)
    order = torch.cat([torch.stack([torch.arange(half), torch.arange(half, r)], dim=1).flatten(), torch.arange(r, D)])
    q_ref, k_ref = RotaryEmbedding(dim=r, use_xpos=True, xpos_scale_base=scale_base,
                                   cache_if_possible=False).rotate_queries_and_keys(q[..., order], k[..., order])
    causal = torch.ones(length, length, dtype=torch.bool).tril()  # future keys grow as zeta^(-(j-i)/B); masked
    with torch.no_grad():
        torch.testing.assert_close((outputs["ours"][0] @ outputs["ours"][1].transpose(-1, -2))[..., causal],
                                   (q_ref @ k_ref.transpose(-1, -2))[..., causal], rtol=1e-5, atol=1e-5)


def float64_score(q, k, n: int, m: int, scale_base: int, base: float = 10000.0) -> float:
    """q.k after xPos for a query at n and key at m (rotate-half layout, all dims rotated), float64."""
    half = q.shape[-1] // 2
    theta = (n - m) * base ** (-torch.arange(half, dtype=torch.float64) / half)
    q1, q2, k1, k2 = q[:half], q[half:], k[:half], k[half:]
    rotated = (q1 * k1 + q2 * k2) * theta.cos() + (q1 * k2 - q2 * k1) * theta.sin()  # per pair
    return float((rotated * zeta(2 * half) ** ((n - m) / scale_base)).sum())


@pytest.mark.parametrize("n, m", [(5, 5), (40, 3), (2000, 1000), (33000, 32990), (33900, 0)])
def test_scores_match_float64_formula_far_from_position_zero(n, m):
    torch.manual_seed(1)
    pe = build_positional_embedding("xpos", num_heads=1, head_dim=D)
    q, k = torch.randn(D, dtype=torch.float64), torch.randn(D, dtype=torch.float64)
    # Past a few thousand positions rotary's float32 angles n * theta_k are off by up to n * 2^-24 rad,
    # which limits every dim pair but the first (theta_0 = 1: exact angles, and the strongest decay,
    # zeta_0 = 0.4/1.4, so the largest scales): that pair alone is held to 1e-5 at every distance.
    first_pair = torch.zeros(D, dtype=torch.float64)
    first_pair[[0, D // 2]] = 1.0
    for q_, k_, tolerance in [(q, k, 1e-5 if n <= 2000 else 2e-3), (q * first_pair, k * first_pair, 0.0)]:
        q_out, k_out = pe.rotate_qk(q_.float().view(1, 1, 1, D), k_.float().view(1, 1, 1, D),
                                    torch.tensor([n]), torch.tensor([m]))
        score = float((q_out.double() * k_out.double()).sum())
        assert score == pytest.approx(float64_score(q_, k_, n, m, 512), rel=1e-5, abs=tolerance)


def test_positions_past_the_dtype_range_are_refused_with_the_numbers():
    pe = build_positional_embedding("xpos", num_heads=1, head_dim=D)
    x = torch.randn(1, 1, 2, D)
    limit = 512 * (math.log(torch.finfo(torch.float16).max) - 8 * math.log(2)) / -math.log(0.4 / 1.4)
    assert pe.max_position(torch.float16) == int(limit) == 2266
    pe.rotate_qk(x.half(), x.half(), torch.tensor([0, 2266]), torch.tensor([0, 2266]))
    with pytest.raises(PositionalEmbeddingError, match=r"position 2267 .* largest position in torch.float16 is 2266"):
        pe.rotate_qk(x.half(), x.half(), torch.tensor([0, 2267]), torch.tensor([0, 2267]))
    q, k = pe.rotate_qk(x, x, torch.tensor([0, 33994]), torch.tensor([0, 33994]))
    assert torch.isfinite(q).all() and torch.isfinite(k).all()
    with pytest.raises(PositionalEmbeddingError, match=r"largest position in torch.float32 is 33994"):
        pe.rotate_qk(x, x, torch.tensor([33995]), torch.tensor([33995]))


@pytest.mark.parametrize("scale_base", [4, 512])
def test_cached_generation_equals_a_full_forward_with_a_strong_decay(scale_base):
    # B = 4: zeta_0^(64/4) ~ 2e-9 at 4x the training length, so a key scaled with another offset
    # than its query would change the logits far past 1e-5.
    model = tiny_model("xpos", xpos_scale_base=scale_base)
    assert_cache_matches_full_forward(model, PROMPTS, 64 - len(PROMPTS[0]))
