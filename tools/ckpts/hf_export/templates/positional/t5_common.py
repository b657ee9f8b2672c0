class T5Bias(PositionalBase):
    """A learned per-head bias per log-spaced distance bucket, times sqrt(head_dim). Causal buckets:
    d < B/2 its own; larger d: B/2 + floor(log(d / (B/2)) / log(max_distance / (B/2)) * B/2), <= B-1."""

    def __init__(self, config):
        super().__init__(config)
        self.num_buckets = int(self.options.get("rpe_num_buckets", 32))
        self.max_distance = int(self.options.get("rpe_max_distance", 128))
        self.table = nn.Parameter(torch.zeros(self.num_buckets, self.num_heads))  # [buckets, H]

    def buckets(self, d):
        exact = self.num_buckets // 2
        far = exact + (torch.log(d.clamp(min=exact).float() / exact) / math.log(self.max_distance / exact)
                       * (self.num_buckets - exact)).long()
        return torch.where(d < exact, d, far.clamp(max=self.num_buckets - 1))

    def distance_tables(self, length, device):
        d = torch.arange(length, device=device)
        return self.table.float()[self.buckets(d)].T * math.sqrt(self.head_dim), None  # [H, L]
