"""`cope`: Contextual Position Encoding (Golovneva et al., 2024, "Contextual Position Encoding: Learning to
Count What's Important"). Positions are counted by the context: query i gates every key it sees,
    g_ij = sigmoid(s_ij),    p_ij = sum_{t = j..i} g_it    (only visible keys t count),
and adds q_i . e[p_ij] to the logit, with e a learned table of `cope-max-positions` vectors of the head
dimension shared by the heads, read at the fractional p_ij by linear interpolation between e[floor p]
and e[ceil p], p clamped to max - 1. s_ij are the logits before CoPE: q_i . k_j / sqrt(D) (with the
scores' weight and bias, were another term there); q_i . e[p] is not scaled. As the paper's Appendix B
code and x-transformers' CoPE (tests/model/positional/test_cope.py checks against the latter): the gates of keys that
are not visible are 0, the table starts at zeros (a model without positions at step 0).

p_ij needs the whole visible row of scores, so CoPE modifies the score matrix (base.py's
`modify_scores`): attention runs it on the strategies that write the scores out a block of query rows at
a time, and a KV-cache step runs it on its query rows against the cached keys (same numbers: a row reads
only its own visible keys)."""
from dataclasses import dataclass

import torch
from torch import nn

from .base import PositionalEmbedding, option, positive
from .registry import register


@register("cope")
class CoPE(PositionalEmbedding):
    channels = frozenset({"score_rewrite", "query_terms"})  # its positions are counted from the scores

    @dataclass
    class Options:
        cope_max_positions: int = option(64, "`cope`: rows of the learned position table e (contextual positions "
                                             "past max - 1 read its last row).", check=positive)

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        self.max_positions = self.options.cope_max_positions
        self.position_table = nn.Parameter(torch.zeros(self.max_positions, shape.head_dim))  # e [P, D]

    def pairwise(self, q_positions, k_positions):
        return None, None  # no bias or weight of its own: all of it is in modify_scores

    def pairwise_bytes(self, needs_grad):
        return 0

    def modify_scores(self, scores, bias, q, k, q_positions, k_positions, visible):
        logits = scores if bias is None else scores + bias                       # [b, H, q, k]
        gates = torch.sigmoid(logits).masked_fill(~visible, 0)
        p = gates.flip(-1).cumsum(-1).flip(-1).clamp(max=self.max_positions - 1)  # sum over t = j..last key
        per_row = q @ self.position_table.to(q.dtype).T                          # q_i . e[n]: [b, H, q, P]
        lower = p.floor()
        w = p - lower
        at_lower = per_row.gather(-1, lower.long())
        at_upper = per_row.gather(-1, p.ceil().long())
        return logits + at_upper * w + at_lower * (1 - w)

    def score_bytes(self):
        """fp32 gates, their reversed running sum and its clamp, floor and w (4 each), the two int64
        indices (8 each), the two gathered values and the sum (4 each): about 64 a pair and head."""
        return 64
