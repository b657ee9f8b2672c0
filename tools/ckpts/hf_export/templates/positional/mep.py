# needs: mep_common
class PositionalMethod(MEPBase):
    """`mep`: the parameter-free mixture of exponential, exponential_half and gaussian (weights 1/3)."""

    def __init__(self, config):
        super().__init__(config, MEPBase.FIXED, None)
