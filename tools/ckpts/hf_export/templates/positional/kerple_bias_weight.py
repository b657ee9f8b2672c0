# needs: kerple_common
class PositionalMethod(KernelBase):
    """`kerple_bias_weight`: score * exp(-r3 * d^r4) - r1 * d^r2."""
    PARAMS = {"r1": "multiplier", "r2": "exponent", "r3": "multiplier", "r4": "exponent"}

    def kernel(self, d, r1, r2, r3, r4):
        return -r1 * d.pow(r2), torch.exp(-r3 * d.pow(r4))
