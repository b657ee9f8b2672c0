# needs: alibi_slopes
class PositionalMethod(PositionalBase):
    """`alibi`: bias b_h(d) = -m_h * d."""

    def __init__(self, config):
        super().__init__(config)
        self.slopes = alibi_slopes(self.num_heads)

    def distance_tables(self, length, device):
        slopes = torch.tensor(self.slopes, dtype=torch.float32, device=device)
        d = torch.arange(length, dtype=torch.float32, device=device)
        return -slopes[:, None] * d, None
