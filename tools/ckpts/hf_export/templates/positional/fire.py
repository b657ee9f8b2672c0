class PositionalMethod(PositionalBase):
    """`fire`: b_h(i, j) = MLP(psi(i - j) / psi(max(L, i)))_h, psi(x) = log(|c x| + 1), L = fire_init_L
    times a learned multiplier; depends on i itself, so no per-distance table."""

    def __init__(self, config):
        super().__init__(config)
        width = int(self.options.get("fire_mlp_width", 32))
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, self.num_heads))
        self.c = nn.Parameter(torch.zeros(1))
        self.L_multiplier = nn.Parameter(torch.ones(1))
        self.init_L = float(self.options.get("fire_init_L", 512.0))

    def score_terms(self, q_positions, k_positions):
        i, j = q_positions.float()[:, :, None], k_positions.float()[:, None, :]  # [b, q, 1], [b, 1, k]
        c, threshold = self.c.float(), (self.L_multiplier.float() * self.init_L).abs()

        def psi(x):
            return torch.log((c * x).abs() + 1)

        normalised = psi((i - j).clamp(min=0)) / (psi(torch.maximum(i, threshold)) + 1e-6)  # [b, q, k]
        bias = self.mlp(normalised[..., None].to(self.mlp[0].weight.dtype))  # [b, q, k, H]
        return bias.float().permute(0, 3, 1, 2), None
