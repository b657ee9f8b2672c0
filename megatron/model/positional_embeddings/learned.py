"""`learned`: a trained embedding per absolute position, added to the token embeddings. It cannot
embed positions it has no row for, so evaluating past max-position-embeddings is an error."""
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError
from .registry import register


@register("learned")
class Learned(PositionalEmbedding):
    uses_max_positions = True

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        if shape.hidden_size is None or not shape.max_positions:
            raise PositionalEmbeddingError(
                f"pos-emb 'learned' needs hidden_size and max_position_embeddings, got {shape.hidden_size} and "
                f"{shape.max_positions}.")
        self.max_length = shape.max_positions
        self.embedding = nn.Embedding(shape.max_positions, shape.hidden_size)
        nn.init.normal_(self.embedding.weight, std=shape.init_std)

    def add_to_embeddings(self, x, positions):
        last = int(positions.max())
        if last >= self.max_length:
            raise PositionalEmbeddingError(
                f"pos-emb 'learned' can only embed positions < max-position-embeddings={self.max_length}; "
                f"got position {last} (a sequence of {last + 1} tokens). Relative methods such as kerple_log "
                f"extrapolate; learned cannot: evaluate at <= {self.max_length} tokens, or train with a "
                f"larger max-position-embeddings.")
        return x + self.embedding(positions).to(x.dtype)
