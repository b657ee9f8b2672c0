class PositionalMethod(PositionalBase):
    """`none` (NoPE): no positional information besides the causal mask."""
