"""The protocol every attention strategy implements: one small class per way of computing attention.

A strategy class answers two questions before anything is built, from the forward's AttentionInputs:
`can_run` (why it cannot run here, or None) and `memory_bytes` (what it allocates, counted next to
the allocations themselves). `plan_attention` then makes one instance per forward (per positional
module): the plan every layer shares, holding the tables or masks it computed once; `attend` runs it.
"""
import copy

import torch

from megatron.model.attention.inputs import AttentionInputs


class AttentionPlan:
    """One strategy, planned for one forward. Subclasses set `name`, `path` and implement the rest."""
    name: str                 # this strategy, e.g. "toeplitz"
    path: str                 # the `attention-impl` it belongs to: "sdpa" | "flex" | "blocked"
    quadratic_memory = False  # memory_bytes grows with L^2: `auto` takes it only within the budget
    table_grad = False        # a learnable bias table's gradient on the side (table_gradient.py)
    token_terms = None        # F [b, H, s] fp32 of one layer (with_token_terms), or None

    def __init__(self, pe, positions: torch.Tensor, *, window: int | None, block_size: int, span: int,
                 dtype: torch.dtype, bias_table, weight_table):
        self.pe = pe                  # the positional module (layers call pe.rotate_qk)
        self.positions = positions    # LongTensor [s]
        self.window, self.block_size = window, block_size
        self.span = span              # largest distance any query sees, + 1

    @classmethod
    def can_run(cls, inputs: AttentionInputs) -> str | None:
        """Why this strategy cannot compute this forward, or None when it can."""
        return None

    @classmethod
    def memory_bytes(cls, inputs: AttentionInputs) -> int:
        """Bytes this strategy allocates for one forward beyond q, k, v and the output."""
        raise NotImplementedError

    def attend(self, q, k, v, dropout_p: float):
        """q, k, v [b, H, s, D] -> [b, H, s, D]."""
        raise NotImplementedError

    def with_token_terms(self, g: torch.Tensor | None) -> "AttentionPlan":
        """The plan for one layer whose method gives per-token terms g [b, H, s] (pe.token_terms): a
        shallow copy holding F = cumsum(g) in fp32, so score(i, j) += F_i - F_j (g_{j+1} + ... + g_i); the
        shared tables and masks stay shared. Itself when g is None. Strategies that cannot add F refuse in
        `can_run` (AttentionInputs.token_terms)."""
        if g is None:
            return self
        plan = copy.copy(self)
        plan.token_terms = g.float().cumsum(dim=-1)
        return plan

    def __repr__(self):
        return f"{type(self).__name__}(path={self.path!r}, length={self.positions.shape[0]})"
