"""`sandwich` against float64 formulas written here: NVIDIA NeMo's SandwichRelativePositionEmbedding
(D = head dim, k = 1..D/2, divisor 8h/H) and the paper's reading of it, the inner product of two
sinusoidal position embeddings minus D/2."""
import math

import pytest
import torch

from megatron.model.positional_embeddings import build_positional_embedding


def nemo_formula(heads: int, head_dim: int, i: int, j: int) -> list[float]:
    """b_h for query i, key j, h = 1..H, one term at a time (NeMo: |i - j|, future keys get 0)."""
    d = abs(i - j) if j <= i else 0
    inner = sum(math.cos(d / 10000 ** (2 * k / head_dim)) for k in range(1, head_dim // 2 + 1))
    return [(inner - head_dim / 2) / (8 * h / heads) for h in range(1, heads + 1)]


def sinusoid(position: int, head_dim: int) -> torch.Tensor:
    """[sin | cos] of position * 10000^(-2k/D), k = 1..D/2, float64 (the paper's p_n)."""
    k = torch.arange(1, head_dim // 2 + 1, dtype=torch.float64)
    angles = position * 10000.0 ** (-2 * k / head_dim)
    return torch.cat([angles.sin(), angles.cos()])


@pytest.mark.parametrize("heads, head_dim", [(4, 16), (12, 64), (6, 8), (1, 2)])
def test_bias_matches_nemo_formula(heads, head_dim):
    pe = build_positional_embedding("sandwich", num_heads=heads, head_dim=head_dim)
    queries, keys = torch.tensor([0, 1, 7, 63, 500, 4095]), torch.arange(0, 4096, 37)
    bias, weight = pe.pairwise(queries, keys)
    assert weight is None and bias.dtype == torch.float32 and bias.shape == (heads, 6, len(keys))
    expected = torch.tensor([[nemo_formula(heads, head_dim, int(i), int(j)) for j in keys] for i in queries],
                            dtype=torch.float64).permute(2, 0, 1)
    torch.testing.assert_close(bias.double(), expected, rtol=1e-6, atol=1e-6)


def test_long_distances_are_computed_in_float64():
    # At d ~ 30000 a float32 d * frequency is off by up to ~2e-3 radians per term: the sum by ~1.5e-4.
    heads, head_dim = 4, 64
    pe = build_positional_embedding("sandwich", num_heads=heads, head_dim=head_dim)
    table = pe.distance_tables(32768)[0]
    for d in (16383, 30001, 32767):
        expected = torch.tensor(nemo_formula(heads, head_dim, d, 0), dtype=torch.float64)
        torch.testing.assert_close(table[:, d].double(), expected, rtol=1e-6, atol=1e-5)


def test_bias_is_the_sinusoid_inner_product_scaled_per_head():
    heads, head_dim = 8, 32
    pe = build_positional_embedding("sandwich", num_heads=heads, head_dim=head_dim)
    table = pe.distance_tables(300)[0].double()
    for i, j in [(5, 5), (9, 2), (299, 0), (250, 17)]:
        inner = float(sinusoid(i, head_dim) @ sinusoid(j, head_dim))  # = sum_k cos((i - j) w_k)
        for h in range(1, heads + 1):
            assert table[h - 1, i - j].item() == pytest.approx((inner - head_dim / 2) * heads / (8 * h), abs=1e-5)


def test_no_penalty_at_distance_zero_and_none_positive():
    table = build_positional_embedding("sandwich", num_heads=4, head_dim=16).distance_tables(2000)[0]
    assert torch.all(table[:, 0] == 0) and torch.all(table <= 0)
    assert torch.all(table[0] <= table[1]) and list(build_positional_embedding(
        "sandwich", num_heads=4, head_dim=16).parameters()) == []  # head 1 steepest; parameter-free
