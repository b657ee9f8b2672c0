"""The protocol every attention strategy implements: one small class per way of computing attention.

A strategy class answers two questions before anything is built, from the forward's AttentionInputs:
`can_run` (why it cannot run here, or None) and `memory_bytes` (what it allocates, counted next to
the allocations themselves). `can_run` is not written per strategy: each declares what it `handles`
(channels and layouts, the names of needs.py) and what it `requires` (what it exists for, e.g. a
learnable table for the table gradient), and cannot run where the forward needs something it does not
handle, or lacks something it requires; the reason is generated from that difference. A new channel is
a new need: the strategies that handle it list it, and every other one refuses by construction. `plan_attention` then makes one instance per forward (per positional
module): the plan every layer shares, holding the tables or masks it computed once; `attend` runs it.
"""
import copy

import torch

from megatron.model.attention.inputs import AttentionInputs, terms_by_distance
from megatron.model.attention.masks import allowed_keys, keys_seen, same_document
from megatron.model.attention.needs import NEEDS, needs_of
from megatron.model.attention.rotation import rotate
from megatron.model.attention.written_out import DOT_PRODUCTS, at_tokens, dot_product_channel


class AttentionPlan:
    """One strategy, planned for one forward. Subclasses set `name`, `path` and implement the rest."""
    name: str                 # this strategy, e.g. "toeplitz"
    path: str                 # the `attention-impl` it belongs to: "sdpa" | "flex" | "blocked" | "fla"
    quadratic_memory = False  # memory_bytes grows with L^2: `auto` takes it only within the budget
    table_grad = False        # a learnable bias table's gradient on the side (table_gradient.py)
    handles: frozenset = frozenset()  # the needs (needs.py) it computes, listed: any other, a new one too, refuses it
    requires: frozenset = frozenset()  # the needs it exists for; a forward without one refuses it
    # One layer's own values (with_layer: an attribute per channel, absent where the layer has none); those the
    # strategies read by name:
    token_terms = None        # F = cumsum(g) [b, H, s] fp32 (pe.token_terms: fox)
    key_transforms = None     # (w [b, H, s, D], beta [b, H, s]) (pe.key_transforms: path)
    sink = None               # the sink logits s [H] (attention-sink)

    def __init__(self, pe, positions: torch.Tensor, *, window: int | None, block_size: int, span: int,
                 dtype: torch.dtype, bias_table, weight_table, documents=None, row_positions=None):
        self.pe = pe                  # the positional module (layers call pe.rotate_qk)
        self.distance_only = terms_by_distance(pe, bias_table)  # the terms are the tables, not pe.pairwise
        self.positions = positions    # LongTensor [s]: shared by the rows; what the per-distance tables are read at
        self.window, self.block_size = window, block_size
        self.span = span              # largest distance any query sees, + 1
        # Packed documents (reset-attention-mask): each token's document [b, s], keys of other documents
        # hidden; None: every earlier key is visible.
        self.documents = documents
        # Per-row positions [b, s] (reset-position-ids: they restart in each document), or None. They step
        # by 1 inside a document, where `positions` (the index) has the same differences: the tables are
        # exact at `positions`, and only methods that read a position itself (rotate_qk, pairwise) need these.
        self.row_positions = row_positions
        # t [b | 1, H, s] on each query's logits row (pe.query_scale: ssmax), from the keys it sees, or None.
        self.query_scale = (pe.query_scale(keys_seen(positions, window, documents)) if "query_scale" in pe.channels
                            else None)
        # ((cos, sin) of q, (cos, sin) of k) when the method rotates by tables (rotary, xpos): computed here once
        # for every layer of the forward, applied by rotation.py (one fused kernel per tensor on CUDA); or None.
        rotated_at = positions if row_positions is None else row_positions
        self.rotation = pe.rotation_tables(rotated_at, rotated_at, dtype)

    def rotate(self, q, k):
        """q, k [b, H, s, D] rotated by the method (rotary) at each row's positions, q times query_scale."""
        if self.rotation is not None:
            (q_cos, q_sin), (k_cos, k_sin) = self.rotation
            q, k = rotate(self.pe, q, q_cos, q_sin), rotate(self.pe, k, k_cos, k_sin)
        elif self.row_positions is None:
            q, k = self.pe.rotate_qk(q, k, self.positions, self.positions)
        else:
            rows = [self.pe.rotate_qk(q[r:r + 1], k[r:r + 1], p, p) for r, p in enumerate(self.row_positions)]
            q, k = torch.cat([q_ for q_, _ in rows]), torch.cat([k_ for _, k_ in rows])
        if self.query_scale is not None:
            work = torch.promote_types(q.dtype, torch.float32)  # bf16 up to fp32, fp64 kept
            q = (q.to(work) * self.query_scale[..., None].to(work)).to(q.dtype)
        return q, k

    def visible(self, queries: slice, keys: slice):
        """bool [q, k] (or [b, 1, q, k] with documents): key j is visible to query i, for the queries and
        keys of these index ranges (causality by index; the window by position distance)."""
        q_index = torch.arange(self.positions.shape[0], device=self.positions.device)[queries]
        allowed = allowed_keys(self.positions[queries], self.positions[keys], q_index, self.window)
        if self.documents is not None:
            allowed = allowed & same_document(self.documents, queries, keys)
        return allowed

    def pairwise(self, queries: slice, keys: slice):
        """The method's (bias, weight) for these index ranges from pe.pairwise: [H, q, k] each, or
        [b | 1, H, q, k] with per-row positions or a query_scale (either None when the method has none)."""
        if self.row_positions is None:
            bias, weight = self.pe.pairwise(self.positions[queries], self.positions[keys])
        else:
            rows = [self.pe.pairwise(p[queries], p[keys]) for p in self.row_positions]
            bias, weight = (None if terms[0] is None else torch.stack(terms) for terms in zip(*rows))
        if bias is not None and self.query_scale is not None:  # t_i scales the whole row: [b | 1, H, q, k]
            bias = bias * self.query_scale[:, :, queries, None]
        return bias, weight

    @classmethod
    def can_run(cls, inputs: AttentionInputs) -> str | None:
        """Why this strategy cannot compute this forward, or None when it can: the first need (in
        needs.py's order) that the forward has and the strategy does not handle, or that the strategy
        requires and the forward lacks."""
        needed = needs_of(inputs)
        for need in NEEDS:
            if need in needed and need not in cls.handles:
                return cls.refusal(need, inputs)
            if need in cls.requires and need not in needed:
                return cls.lacking(need)
        return None

    @classmethod
    def missing_package(cls, inputs: AttentionInputs) -> str | None:
        """Why this strategy cannot run here when a package this machine lacks is all that stops it (`auto`
        then says so, once, rather than pass it over in silence); None otherwise, and for most strategies."""
        return None

    @classmethod
    def refusal(cls, need: str, inputs: AttentionInputs) -> str:
        """The reason for a need this strategy does not handle."""
        return f"it does not handle {NEEDS[need]}"

    @classmethod
    def lacking(cls, need: str) -> str:
        """The reason for a need this strategy requires and the forward lacks."""
        return f"it runs only with {NEEDS[need]}"

    @classmethod
    def memory_bytes(cls, inputs: AttentionInputs) -> int:
        """Bytes this strategy allocates for one forward beyond q, k, v and the output."""
        raise NotImplementedError

    def attend(self, q, k, v, dropout_p: float):
        """q, k, v [b, H, s, D] -> [b, H, s, D]."""
        raise NotImplementedError

    def with_layer(self, values: dict) -> "AttentionPlan":
        """The plan for one layer: a shallow copy holding that layer's own values ({channel: value}, one attribute
        each; None entries are absent), while the tables and masks every layer shares stay shared. Itself when it
        has none. A strategy that cannot apply a value refuses in `can_run` (its need, needs.py)."""
        given = {channel: value for channel, value in values.items() if value is not None}
        if not given:
            return self
        plan = copy.copy(self)
        for channel, value in given.items():
            setattr(plan, channel, plan.kept(channel, value))
        return plan

    def kept(self, channel: str, value):
        """How this plan keeps a layer's value of `channel`: one whose running sums the scores read
        (pe.reads_running_sum: g [b, H, s, ...]) as those sums over the tokens in fp32 or wider, so score(i, j)
        reads F_i - F_j; others as given."""
        if self.pe.reads_running_sum(channel):
            return value.to(torch.promote_types(value.dtype, torch.float32)).cumsum(dim=2)
        return value

    def dot_products(self, q_start: int, keys: int):
        """written_out.attend_written_out's `dot_products` for queries q_start.. against keys 0..keys-1: those of
        the layer channel this plan holds that replaces q . k (written_out.DOT_PRODUCTS), or None for q . k."""
        held = dot_product_channel(self)
        if held is None:
            return None
        scores, value = DOT_PRODUCTS[held].scores, getattr(self, held)
        return lambda q, k: scores(q, k, at_tokens(value, q_start, q_start + q.shape[2]), at_tokens(value, 0, keys),
                                   q_start, 0)

    def __repr__(self):
        return f"{type(self).__name__}(path={self.path!r}, length={self.positions.shape[0]})"
