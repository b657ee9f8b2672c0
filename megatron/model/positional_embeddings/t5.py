"""`t5` (upstream NeoX: `rpe`): a learned per-head bias for each of a few log-spaced distance buckets.

Causal bucketing (buckets not halved): d < B/2 gets its own bucket; larger d share
B/2 + floor(log(d / (B/2)) / log(max_distance / (B/2)) * B/2) buckets, capped at B - 1. As in the
reference, the looked-up value is multiplied by sqrt(head_dim) before it is added to the scaled scores.
"""
import math
from dataclasses import dataclass

import torch
from torch import nn

from .base import OptionError, PositionalEmbedding, option, positive
from .registry import register


def causal_buckets(d: torch.Tensor, num_buckets: int, max_distance: int) -> torch.Tensor:
    """Bucket index of each distance d >= 0 (LongTensor in, LongTensor out)."""
    exact = num_buckets // 2
    far = exact + (torch.log(d.clamp(min=exact).float() / exact) / math.log(max_distance / exact)
                   * (num_buckets - exact)).long()
    return torch.where(d < exact, d, far.clamp(max=num_buckets - 1))


@register("t5", aliases=("rpe",))
class T5RelativeBias(PositionalEmbedding):
    @dataclass
    class Options:
        rpe_num_buckets: int = option(32, "`t5`: number of relative-position buckets.", check=positive)
        rpe_max_distance: int = option(128, "`t5`: distance at which the last bucket starts growing no more.",
                                       check=positive)

        def __post_init__(self):
            if not 2 <= self.rpe_num_buckets < 2 * self.rpe_max_distance:
                raise OptionError("rpe_num_buckets", (
                    f"pos-emb 't5' needs 2 <= rpe-num-buckets < 2 * rpe-max-distance, got rpe-num-buckets="
                    f"{self.rpe_num_buckets}, rpe-max-distance={self.rpe_max_distance} (the defaults are 32 "
                    "and 128)."))

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        self.num_buckets, self.max_distance = self.options.rpe_num_buckets, self.options.rpe_max_distance
        self.table = nn.Parameter(torch.empty(self.num_buckets, shape.num_heads))  # [buckets, H]
        nn.init.xavier_normal_(self.table)

    def distance_tables(self, length):
        buckets = causal_buckets(torch.arange(length, device=self.device), self.num_buckets, self.max_distance)
        return self.table.float()[buckets].T * math.sqrt(self.head_dim), None  # [H, L]
