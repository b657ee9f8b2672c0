def alibi_slopes(num_heads):
    """m_h = 2^(-8(h+1)/c) for the largest power of two c <= H; the remaining heads take the
    even-indexed slopes of the 2c-head list."""
    def geometric(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]
    c = 2 ** math.floor(math.log2(num_heads))
    return geometric(c) + geometric(2 * c)[0::2][: num_heads - c]
