class PositionalMethod(PositionalBase):
    """`rotary`: rotate the first rotary_pct of each head's dims, rotate-half layout
    ([x1 | x2] -> [x1 cos - x2 sin | x2 cos + x1 sin]), angles in float32."""

    def __init__(self, config):
        super().__init__(config)
        self.rotary_dims = int(self.head_dim * float(self.options.get("rotary_pct", 1.0)))
        self.base = float(self.options.get("rotary_emb_base", 10000))

    def rotate(self, x, positions):
        half = self.rotary_dims // 2
        inv_freq = self.base ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
        angles = positions.float()[:, None, :, None] * inv_freq  # [b, 1, s, half]
        cos, sin = angles.cos(), angles.sin()
        x1, x2 = x[..., :half].float(), x[..., half:self.rotary_dims].float()
        rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)
        return torch.cat([rotated.to(x.dtype), x[..., self.rotary_dims:]], dim=-1)
