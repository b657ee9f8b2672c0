# needs: alibi_slopes t5_common kerple_common
class MEPBase(PositionalBase):
    """MEP: b_h(d) = log(sum_k w_k K_k,h(d)), a float32 logsumexp of log-kernels (ALiBi slopes m_h):
    exponential -m d; exponential_half -(m/2) d; gaussian -m d^2; t5: the T5 table x sqrt(D);
    kerple_log: -p log(1 + a d). Weights normalised to sum to 1."""
    FIXED = ("exponential", "exponential_half", "gaussian")

    def __init__(self, config, kernels, weights):
        super().__init__(config)
        self.kernels = list(kernels)
        weights = list(weights or [1.0] * len(self.kernels))
        self.log_weights = [math.log(w / sum(weights)) for w in weights]
        self.slopes = alibi_slopes(self.num_heads)
        learned = {"t5": lambda: T5Bias(config),
                   "kerple_log": lambda: KerpleLog(config, eps=self.options.get("kerple_eps", 0.01))}
        self.learned = nn.ModuleDict({k: learned[k]() for k in self.kernels if k in learned})

    def log_kernel(self, kernel, d, m):
        if kernel == "exponential":
            return -m * d
        if kernel == "exponential_half":
            return -(m / 2) * d
        if kernel == "gaussian":
            return -m * d * d
        return self.learned[kernel].distance_tables(len(d), d.device)[0]

    def distance_tables(self, length, device):
        d = torch.arange(length, dtype=torch.float32, device=device)
        m = torch.tensor(self.slopes, dtype=torch.float32, device=device)[:, None]
        terms = [w + self.log_kernel(k, d, m) for k, w in zip(self.kernels, self.log_weights)]
        return torch.logsumexp(torch.stack(terms), dim=0), None  # [H, L]
