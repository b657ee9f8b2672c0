"""`stickbreaking` (Tan et al., ICLR 2025, "Scaling Stick-Breaking Attention: An Efficient Implementation and
In-depth Study", arXiv 2410.17980): no softmax and no position encoding. Query i breaks a stick of length 1,
nearest key first: with z_ij = q_i . k_j / sqrt(D) and beta_ij = sigmoid(z_ij),
    A_ij = beta_ij * prod_{j < l < i} (1 - beta_il),        out_i = sum_j A_ij v_j,
over the visible keys j < i (an invisible key neither takes a share nor breaks the stick). The weights of
a row sum to at most 1; what is left (prod over all its keys of 1 - beta) is dropped, as in the paper and
flash-linear-attention's `stickbreaking_attn` (`rem`, returned there beside the output, unused by its layer).
No bias is added to z (the paper's equations have none; fla's kernel neither).

The query's own position: the paper's sum runs over j < i, and fla's `attend_current` defaults to False;
`stickbreaking-attend-current: true` lets a query take a share of its own value too (j <= i, l <= i), as
fla's option does. Without it the first token of a sequence (or of a packed document) sees no key and its
attention output is 0.

This is the positional protocol's `normalise` channel (base.py): attention writes out the logits (masked
with -inf) and this file turns them into weights, in log space (logsigmoid and a cumulative sum from the
query backwards, the form of fla's naive reference), so a block of query rows needs only its own rows:
the blocked path holds block x L (O(L) per query), and a KV-cache step reads its rows against the cached
keys. Which key is the query's own is read from the positions (they rise along a row, so key j is query
i's own token exactly where their positions agree among the visible keys)."""
from dataclasses import dataclass

import torch.nn.functional as F

from .base import PositionalEmbedding, option
from .registry import register


def own_tokens(q_positions, k_positions):
    """bool [q, k] or [b, 1, q, k]: key j is query i's own token (their positions agree)."""
    own = q_positions[..., :, None] == k_positions[..., None, :]
    return own[:, None] if own.dim() == 3 else own


@register("stickbreaking", aliases=("stick_breaking",))
class StickBreaking(PositionalEmbedding):
    channels = frozenset({"normaliser"})

    @dataclass
    class Options:
        stickbreaking_attend_current: bool = option(
            False, "`stickbreaking`: a query also breaks the stick at its own token (j <= i); false: the "
                   "paper's j < i (fla's default), and the first token's attention output is 0.",
            exclusive=True, label="attend-current")  # fla's stick-breaking kernel reads it by this name (fla_kernels.py)

    def normalise(self, logits, visible, q_positions, k_positions):
        seen = visible if self.options.stickbreaking_attend_current else visible & ~own_tokens(q_positions, k_positions)
        log_rest = F.logsigmoid(-logits).masked_fill(~seen, 0.0)            # log(1 - beta_il), 0 where not seen
        nearer = log_rest.flip(-1).cumsum(-1).flip(-1) - log_rest            # sum over the seen l > j
        return (F.logsigmoid(logits) + nearer).masked_fill(~seen, float("-inf")).exp()

    def score_bytes(self):
        """logsigmoid of z and of -z, the reversed cumulative sum (two flips), the sum and its exp, in fp32."""
        return 6 * 4
