# needs: kerple_common
class PositionalMethod(KernelBase):
    """`kerple_log3`: b_h(d) = -r1 * log(1 + r2 * d^r3)."""
    PARAMS = {"r1": "multiplier", "r2": "multiplier", "r3": "exponent"}

    def kernel(self, d, r1, r2, r3):
        return -r1 * torch.log1p(r2 * d.pow(r3)), None
