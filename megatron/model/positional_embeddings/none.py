"""`none` (NoPE): no positional information besides the causal mask."""
from .base import PositionalEmbedding, register


@register("none")
class NoPositionalEmbedding(PositionalEmbedding):
    pass
