class PositionalMethod(PositionalBase):
    """`learned`: a trained embedding per absolute position; none past max_position_embeddings."""

    def __init__(self, config):
        super().__init__(config)
        self.max_length = config.max_position_embeddings
        self.embedding = nn.Embedding(config.max_position_embeddings, config.hidden_size)

    def add_to_embeddings(self, x, positions):
        last = int(positions.max())
        if last >= self.max_length:
            raise ValueError(
                f"this `learned` model embeds positions < max_position_embeddings={self.max_length}, but got "
                f"position {last} (a sequence of {last + 1} tokens). It cannot extrapolate: give at most "
                f"{self.max_length} tokens (prompt and generated tokens together).")
        return x + self.embedding(positions).to(x.dtype)
