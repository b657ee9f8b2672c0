# needs: kerple_common
class PositionalMethod(KernelBase):
    """`kerple_power`: b_h(d) = -r1 * d^r2."""
    PARAMS = {"r1": "multiplier", "r2": "exponent"}

    def kernel(self, d, r1, r2):
        return -r1 * d.pow(r2), None
