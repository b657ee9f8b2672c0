"""`t5` (upstream NeoX: `rpe`): a learned per-head bias for each of a few log-spaced distance buckets.

Causal bucketing (buckets not halved): d < B/2 gets its own bucket; larger d share
B/2 + floor(log(d / (B/2)) / log(max_distance / (B/2)) * B/2) buckets, capped at B - 1. As in the
reference, the looked-up value is multiplied by sqrt(head_dim) before it is added to the scaled scores.
"""
import math

import torch
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError, register


def causal_buckets(d: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """Bucket index of each distance d >= 0 (LongTensor in, LongTensor out)."""
    exact = num_buckets // 2
    far = exact + (torch.log(d.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
                   * (num_buckets - exact)).long()
    return torch.where(d < exact, d, far.clamp(max=num_buckets - 1))


@register("t5")
class T5RelativeBias(PositionalEmbedding):
    def __init__(self, num_heads, head_dim, hidden_size=None, *, rpe_num_buckets: int = 32,
                 rpe_max_distance: int = 128):
        super().__init__(num_heads, head_dim, hidden_size)
        if not 2 <= rpe_num_buckets < 2 * rpe_max_distance:
            raise PositionalEmbeddingError(
                f"pos-emb 't5': need 2 <= rpe-num-buckets < 2 * rpe-max-distance, got rpe-num-buckets="
                f"{rpe_num_buckets}, rpe-max-distance={rpe_max_distance} (the defaults are 32 and 128).")
        self.num_buckets, self.max_distance = rpe_num_buckets, rpe_max_distance
        self.table = nn.Parameter(torch.empty(rpe_num_buckets, num_heads))  # [buckets, H]
        nn.init.xavier_normal_(self.table)

    def distance_tables(self, length):
        buckets = causal_buckets(torch.arange(length, device=self.device), self.num_buckets, self.max_distance)
        return self.table.float()[buckets].T * math.sqrt(self.head_dim), None  # [H, L]
