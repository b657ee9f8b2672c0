"""`none` (NoPE): no positional information besides the causal mask."""
from .base import PositionalEmbedding
from .registry import register


@register("none")
class NoPositionalEmbedding(PositionalEmbedding):
    pass
