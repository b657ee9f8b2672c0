"""`sandwich` (Chi et al., 2023, "Dissecting Transformer Length Extrapolation via the Lens of Receptive
Field Analysis"): the inner product of two sinusoidal position embeddings as a fixed, parameter-free bias,
    b_h(d) = (sum_{k=1}^{D/2} cos(d / 10000^(2k/D)) - D/2) / (8h/H),   h = 1..H,
added to the scaled scores. As NVIDIA NeMo implements it (SandwichRelativePositionEmbedding): D is the
head dimension (NeMo passes `hidden_size // num_attention_heads`, or kv_channels, as its `hidden_size`),
k runs from 1 (not 0) to D/2, and the bias is added after the 1/sqrt(D) scaling. b_h(0) = 0 and
b_h(d) <= 0; head 1 has the steepest bias. The sum is taken in float64 (d * frequency in float32 is off
by about d * 6e-8 radians per term at long d) and the table returned in float32.
"""
import torch

from .base import PositionalEmbedding
from .registry import register


@register("sandwich")
class Sandwich(PositionalEmbedding):
    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        # Plain floats, not buffers: a buffer would be rounded by model.half()/.bfloat16().
        self.divisors = [8.0 * h / shape.num_heads for h in range(1, shape.num_heads + 1)]

    def distance_tables(self, length):
        D = self.head_dim
        k = torch.arange(1, D / 2 + 1, device=self.device, dtype=torch.float64)  # NeMo's k (D/2 terms)
        inv_freq = 10000.0 ** (-2.0 * k / D)                                           # [D/2]
        d = torch.arange(length, device=self.device, dtype=torch.float64)
        inner = torch.cos(d[:, None] * inv_freq).sum(dim=-1) - D / 2                 # [L]
        divisors = torch.tensor(self.divisors, device=self.device, dtype=torch.float64)
        return (inner[None, :] / divisors[:, None]).float(), None                    # [H, L]
