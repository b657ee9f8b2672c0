"""`pope` (Gopalakrishnan et al. 2025, "Decoupling the 'What' and 'Where' With Polar Coordinate Positional
Embeddings", arXiv 2509.10534): each of a head's D dims c of q and k becomes a complex number whose magnitude is
softplus of the dim's value (the "what") and whose phase is the position times a frequency theta_c (the
"where"), with a learned phase bias delta_hc on the keys:

    score(i, j) = sum_c softplus(q_ic) softplus(k_jc) cos((i - j) theta_c - delta_hc) / sqrt(D)
    theta_c = base^(-c / D), c = 0..D-1 (D frequencies, not rotary's D/2 pairs),   delta_hc in [-2 pi, 0]

as x-transformers' PolarEmbedding and apply_polar_pos_emb compute it (the tests compare with them):
q -> [mu cos(i theta) | mu sin(i theta)] and k -> [mu cos(j theta + delta) | mu sin(j theta + delta)], so q and k
leave `rotate_qk` with 2D dims (v keeps D). Attention divides q . k by the square root of q's dims, 2D here,
where PoPE divides by sqrt(D): q carries the factor sqrt(2) that makes the two agree, on every path.
delta starts at 0 (x-transformers' default; `pope-bias-uniform-init` draws it from U(-2 pi, 0)) and is
clamped into [-2 pi, 0] in every forward, as x-transformers does. Phases are computed in float64 and
rounded once to the compute dtype.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .base import PositionalEmbedding, option
from .registry import register
from .xpos import rotary_option


@register("pope")
class PoPE(PositionalEmbedding):
    @dataclass
    class Options:
        rotary_emb_base: int = rotary_option("rotary_emb_base")  # theta_c = base^(-c/D), one declaration
        pope_bias_uniform_init: bool = option(
            False, "`pope`: start each key phase bias delta_hc at a draw from U(-2 pi, 0) instead of 0.",
            init_only=True, exclusive=True)

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        # Plain floats, not a buffer: a buffer would be rounded by model.half()/.bfloat16().
        self.inv_freq = [self.options.rotary_emb_base ** (-c / shape.head_dim) for c in range(shape.head_dim)]
        self.phase_bias = nn.Parameter(torch.zeros(shape.num_heads, shape.head_dim))
        if self.options.pope_bias_uniform_init:
            with torch.no_grad():
                self.phase_bias.uniform_(-2 * math.pi, 0.0)

    @property
    def qk_head_dim(self) -> int:
        return 2 * self.head_dim

    def _phases(self, positions, dtype):
        """position x theta_c, float64 then `dtype`: [1, 1, s, D] for positions [s], [b, 1, s, D] for [b, s]."""
        inv_freq = torch.tensor(self.inv_freq, dtype=torch.float64, device=positions.device)
        angles = positions.to(torch.float64)[..., None] * inv_freq
        return (angles[None, None] if angles.dim() == 2 else angles[:, None]).to(dtype)

    def rotate_qk(self, q, k, q_positions, k_positions):
        """q, k [b, H, s, D] -> [b, H, s, 2D] each, in q's dtype (computed in float32 or wider)."""
        dtype = torch.promote_types(q.dtype, torch.float32)
        q_phase = self._phases(q_positions, dtype)
        k_phase = self._phases(k_positions, dtype) + self.phase_bias.to(dtype).clamp(-2 * math.pi, 0.0)[:, None, :]
        q_mag, k_mag = F.softplus(q.to(dtype)) * math.sqrt(2.0), F.softplus(k.to(dtype))
        return (torch.cat([q_mag * q_phase.cos(), q_mag * q_phase.sin()], dim=-1).to(q.dtype),
                torch.cat([k_mag * k_phase.cos(), k_mag * k_phase.sin()], dim=-1).to(k.dtype))
