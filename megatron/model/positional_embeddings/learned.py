"""`learned`: a trained embedding per absolute position, added to the token embeddings. It cannot
embed positions it has no row for, so evaluating past max-position-embeddings is an error."""
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError, register


@register("learned")
class Learned(PositionalEmbedding):
    def __init__(self, num_heads, head_dim, hidden_size=None, *, max_position_embeddings: int | None = None,
                 init_method_std: float = 0.02):
        super().__init__(num_heads, head_dim, hidden_size)
        if hidden_size is None or not max_position_embeddings:
            raise PositionalEmbeddingError(
                f"pos-emb 'learned' needs hidden_size and max_position_embeddings, got {hidden_size} and "
                f"{max_position_embeddings}.")
        self.max_length = max_position_embeddings
        self.embedding = nn.Embedding(max_position_embeddings, hidden_size)
        nn.init.normal_(self.embedding.weight, std=init_method_std)

    def add_to_embeddings(self, x, positions):
        last = int(positions.max())
        if last >= self.max_length:
            raise PositionalEmbeddingError(
                f"pos-emb 'learned' can only embed positions < max-position-embeddings={self.max_length}; "
                f"got position {last} (a sequence of {last + 1} tokens). Relative methods such as kerple_log "
                f"extrapolate; learned cannot: evaluate at <= {self.max_length} tokens, or train with a "
                f"larger max-position-embeddings.")
        return x + self.embedding(positions).to(x.dtype)
