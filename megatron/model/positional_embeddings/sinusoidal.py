"""`sinusoidal`: the fixed absolute encoding of Vaswani et al., laid out [sin | cos] (not
interleaved), computed in float32 and added to the token embeddings."""
import torch

from .base import PositionalEmbedding, PositionalEmbeddingError
from .registry import register


@register("sinusoidal")
class Sinusoidal(PositionalEmbedding):
    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        if shape.hidden_size is None or shape.hidden_size % 2:
            raise PositionalEmbeddingError(
                f"pos-emb 'sinusoidal' needs an even hidden_size, got {shape.hidden_size}.")

    def add_to_embeddings(self, x, positions):
        half = self.hidden_size // 2
        inv_freq = 10000.0 ** (-torch.arange(half, device=x.device, dtype=torch.float32) / half)
        angles = positions.float()[:, None] * inv_freq  # [s, hidden/2]
        return x + torch.cat([angles.sin(), angles.cos()], dim=-1).to(x.dtype)
