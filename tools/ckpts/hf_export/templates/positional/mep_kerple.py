# needs: mep_common
class PositionalMethod(MEPBase):
    """`mep_kerple`: the mixture of `mep_kernels` with `mep_weights` (default uniform)."""

    def __init__(self, config):
        options = dict(config.pos_emb_options or {})
        super().__init__(config, options.get("mep_kernels", ["gaussian", "exponential", "t5", "kerple_log"]),
                         options.get("mep_weights"))
