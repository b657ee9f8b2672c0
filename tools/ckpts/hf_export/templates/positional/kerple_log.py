# needs: kerple_common
class PositionalMethod(KerpleLog):
    """`kerple_log`: b_h(d) = -r1 * log(1 + r2 * d)."""
