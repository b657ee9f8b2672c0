class PositionalMethod(PositionalBase):
    """`sinusoidal`: fixed absolute encoding, [sin | cos] layout, float32, added to the embeddings."""

    def add_to_embeddings(self, x, positions):
        half = self.hidden_size // 2
        inv_freq = 10000.0 ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
        angles = positions.float()[..., None] * inv_freq  # [b, s, hidden/2]
        return x + torch.cat([angles.sin(), angles.cos()], dim=-1).to(x.dtype)
