class KernelBase(PositionalBase):
    """KERPLE kernels. The checkpoint holds the raw, unconstrained parameters `raw_<name>` [H] of the
    training code, mapped to their effective values exactly as in training:
        multiplier = eps + softplus(raw)        exponent = eps + (2 - eps) * sigmoid(raw)"""
    PARAMS = {}  # name -> "multiplier" | "exponent"

    def __init__(self, config, eps=None):
        super().__init__(config)
        self.eps = float(self.options.get("kerple_eps", 0.01) if eps is None else eps)
        for name in self.PARAMS:
            self.register_parameter(f"raw_{name}", nn.Parameter(torch.zeros(self.num_heads)))

    def kernel_parameters(self):
        out = {}
        for name, kind in self.PARAMS.items():
            raw = getattr(self, f"raw_{name}").float()
            out[name] = self.eps + (F.softplus(raw) if kind == "multiplier" else (2 - self.eps) * torch.sigmoid(raw))
        return out

    def distance_tables(self, length, device):
        d = torch.arange(length, dtype=torch.float32, device=device)
        return self.kernel(d, **{name: value[:, None] for name, value in self.kernel_parameters().items()})


class KerpleLog(KernelBase):
    """b_h(d) = -r1 * log(1 + r2 * d)"""
    PARAMS = {"r1": "multiplier", "r2": "multiplier"}

    def kernel(self, d, r1, r2):
        return -r1 * torch.log1p(r2 * d), None
