"""`alibi`: fixed per-head linear penalty b_h(d) = -m_h * d (Press et al., 2022)."""
import math

import torch

from .base import PositionalEmbedding
from .registry import register


def alibi_slopes(num_heads: int) -> list[float]:
    """m_h = 2^(-8(h+1)/c) for the largest power of two c <= H; the remaining heads take the
    even-indexed slopes (0, 2, 4, ...) of the 2c-head list."""
    def geometric(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    c = 2 ** math.floor(math.log2(num_heads))
    return geometric(c) + geometric(2 * c)[0::2][: num_heads - c]


@register("alibi")
class ALiBi(PositionalEmbedding):
    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        # Plain floats, not a buffer: a buffer would be rounded by model.half()/.bfloat16().
        self.slopes = alibi_slopes(shape.num_heads)

    def distance_tables(self, length):
        slopes = torch.tensor(self.slopes, device=self.device, dtype=torch.float32)
        d = torch.arange(length, device=self.device, dtype=torch.float32)
        return -slopes[:, None] * d, None
