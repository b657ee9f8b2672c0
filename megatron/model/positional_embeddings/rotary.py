"""`rotary` (RoPE): rotate the first `rotary_pct` of each head's dims of q and k by position-dependent
angles, rotate-half layout ([x1 | x2] -> [x1 cos - x2 sin | x2 cos + x1 sin], not interleaved).
Positions and angles are float32 (an upstream NeoX bug computed them in bf16)."""
from dataclasses import dataclass

import torch

from .base import PositionalEmbedding, PositionalEmbeddingError, fraction, option
from .registry import register


@register("rotary")
class Rotary(PositionalEmbedding):
    @dataclass
    class Options:
        rotary_pct: float = option(1.0, "Fraction of each head's dimensions that `rotary` rotates.", check=fraction)
        rotary_emb_base: int = option(10000, "Base of the rotary frequencies.")

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        rotary_pct = self.options.rotary_pct
        self.rotary_dims = int(shape.head_dim * rotary_pct)
        if self.rotary_dims < 2 or self.rotary_dims % 2:
            raise PositionalEmbeddingError(
                f"pos-emb 'rotary': rotary-pct={rotary_pct} of head dim {shape.head_dim} gives {self.rotary_dims} "
                f"rotated dims; it must be a positive even number. Choose rotary-pct so that it is.")
        self.base = self.options.rotary_emb_base

    def _rotate(self, x, positions):
        half = self.rotary_dims // 2
        inv_freq = self.base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
        angles = positions.float()[:, None] * inv_freq  # [s, half]
        cos, sin = angles.cos(), angles.sin()
        x1, x2 = x[..., :half].float(), x[..., half:self.rotary_dims].float()
        rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        return torch.cat([rotated.to(x.dtype), x[..., self.rotary_dims:]], dim=-1)

    def rotate_qk(self, q, k, q_positions, k_positions):
        return self._rotate(q, q_positions), self._rotate(k, k_positions)
