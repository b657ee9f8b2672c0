# needs: t5_common
class PositionalMethod(T5Bias):
    """`t5`: learned bucketed relative bias."""
