"""`xpos` (Sun et al., 2023, "A Length-Extrapolatable Transformer"): rotary with a per-dimension decay.
After `rotary`'s rotation (same layout, frequencies and `rotary-pct`; no `rotary-scaling`), the pair of
rotated dims with frequency index k (dims k and k + r/2 in the rotate-half layout, r rotated dims) of a
query at position n is multiplied by zeta_k^(n/B) and of a key at position m by zeta_k^(-m/B), with
    zeta_k = (2k/r + gamma) / (1 + gamma),  k = 0..r/2-1,  gamma = 0.4,  B = `xpos-scale-base`,
so each pair's share of q.k decays as zeta_k^((n-m)/B) with the distance (torchscale's XPOS, and
rotary-embedding-torch's `use_xpos`, which tests/model/positional/test_xpos.py checks against).

Offset: only zeta^((n-m)/B) reaches the scores, so the references centre positions on each forward's
middle (n - L//2). Here positions are used as they are (offset 0): a key cached at step t keeps the
scale it was given then, so any offset that depends on the forward would make the KV cache disagree
with a full forward. The price is range: zeta_0 = 0.4/1.4, so the factor zeta_0^(-m/B) = e^(1.2528 m/B)
passes a dtype's largest value at m = B * ln(max) / 1.2528: 36,260 positions at B = 512 in float32 and
bfloat16, 4,533 in float16. Scales are computed in float64 and applied in float32 (one rounding to the
model's dtype); a forward whose positions leave less than 2^8 of headroom (at B = 512: past 33,994 in
float32/bfloat16, 2,266 in float16) is refused with the numbers rather than silently producing inf.
"""
import math
from dataclasses import dataclass, field

import torch

from .base import PositionalEmbeddingError, option, positive
from .registry import register
from .rotary import Rotary

GAMMA = 0.4
HEADROOM = math.log(2.0 ** 8)  # room left for the values of q and k themselves


def rotary_option(name: str):
    """`rotary`'s declaration of option `name`, reused (same default, help and check)."""
    declared = Rotary.Options.__dataclass_fields__[name]
    return field(default=declared.default, metadata=declared.metadata)


@register("xpos")
class XPos(Rotary):
    @dataclass
    class Options:
        rotary_pct: float = rotary_option("rotary_pct")  # one key, one declaration (registry.py)
        rotary_emb_base: int = rotary_option("rotary_emb_base")
        xpos_scale_base: int = option(512, "`xpos`: scale base B; a query-key pair at distance n - m gets the "
                                           "factor zeta_k^((n-m)/B) on rotated dim pair k.", check=positive)
        rotary_scaling = None  # a class attribute, not an option: Rotary reads it, plain frequencies
        rotary_unrotated_fraction = 0.0  # likewise: every frequency rotated

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        r = self.rotary_dims
        # Plain floats, not a buffer: a buffer would be rounded by model.half()/.bfloat16().
        self.log_zeta = [math.log((2 * k / r + GAMMA) / (1 + GAMMA)) for k in range(r // 2)]
        self.scale_base = self.options.xpos_scale_base

    def max_position(self, dtype: torch.dtype) -> int:
        """The largest position whose scales (and inverse scales) fit `dtype` with HEADROOM to spare."""
        return int((math.log(torch.finfo(dtype).max) - HEADROOM) / -self.log_zeta[0] * self.scale_base)

    def _scale(self, positions, sign: float):
        """zeta_k^(sign * p / B) [..., s, r/2], computed in float64, returned in float32."""
        log_zeta = torch.tensor(self.log_zeta, device=positions.device, dtype=torch.float64)
        return (positions.to(torch.float64)[..., None] * (sign / self.scale_base) * log_zeta).exp().float()

    def rotation_tables(self, q_positions, k_positions, dtype=torch.float32):
        """Rotary's tables times the decay (queries zeta^(n/B), keys zeta^(-m/B)): the rotation and the scale
        in one float32 step, rounded once to the model's dtype."""
        largest = int(max(q_positions.max(), k_positions.max())) if q_positions.numel() else 0
        limit = self.max_position(dtype)
        if largest > limit:
            raise PositionalEmbeddingError(
                f"pos-emb 'xpos': position {largest} needs decay factors up to "
                f"{math.exp(-self.log_zeta[0] * largest / self.scale_base):.3g}, past what {dtype} holds "
                f"({torch.finfo(dtype).max:.3g}, with 2^8 to spare): with xpos-scale-base {self.scale_base} "
                f"the largest position in {dtype} is {limit}. "
                + ("Evaluate in float32 or bfloat16, or train" if dtype == torch.float16 else
                   f"Use sequences of at most {limit + 1} positions, or train")  # float32's range is bfloat16's
                + " with a larger xpos-scale-base.")
        (q_cos, q_sin), (k_cos, k_sin) = super().rotation_tables(q_positions, k_positions, dtype)
        q_scale, k_scale = self._scale(q_positions, 1.0), self._scale(k_positions, -1.0)
        return (q_cos * q_scale, q_sin * q_scale), (k_cos * k_scale, k_sin * k_scale)
