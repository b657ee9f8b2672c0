"""What decides how one forward attends: the method's kind, the device, the sizes; never a layer."""
from dataclasses import dataclass, replace
from typing import Any

import torch

from megatron.errors import NeoXArgsError
from megatron.model.attention.masks import consecutive
from megatron.model.attention.written_out import DOT_PRODUCTS


@dataclass(frozen=True)
class AttentionRun:
    """What the run asks of one forward's attention, whatever the method: `plan_attention`'s record."""
    impl: str = "auto"                   # attention-impl
    window: int | None = None            # attention-window (of this positional module's layers)
    block_size: int = 512                # attention-block-size
    needs_grad: bool = False
    dropout_p: float = 0.0               # attention-dropout, in training
    dtype: torch.dtype = torch.float32   # of q, k and v: the `sdpa` mask is built in it
    batch: int = 1                       # sequences per forward
    memory_budget_mb: int | None = None  # attention-memory-budget
    flex_kernel_options: dict | None = None  # attention-flex-kernel-options (CUDA's flex kernel)
    documents: torch.Tensor | None = None    # [b, s]: each token's packed document (reset-attention-mask)
    row_positions: torch.Tensor | None = None  # [b, s]: per-row positions (reset-position-ids)
    sink: bool = False                   # the layers have a learnable sink (attention-sink): an output-side channel


@dataclass(frozen=True)
class RunShape:
    """The run's side of one forward: what the run asks of attention, whatever the method."""
    device_type: str        # "cpu" | "cuda" | ...
    length: int             # tokens per sequence
    batch: int              # sequences per forward
    heads: int              # the model's attention heads
    head_dim: int
    qk_head_dim: int        # q's and k's after the method's rotate_qk (pope: 2 x head_dim; v keeps head_dim)
    element_size: int       # bytes of one element of q, k and v (the compute dtype)
    block_size: int         # attention-block-size
    needs_grad: bool
    dropout_p: float
    windowed: bool          # attention-window is set
    documents: bool         # packed documents are masked (reset-attention-mask): each row has its own mask
    consecutive: bool       # positions p0, p0 + 1, ... (the usual case)


# The channels that are no score terms of their own (AttentionInputs.has_terms): a factor on q that every strategy
# applies, and two that only qualify another (a score rewrite's reach, a bias table's gradient). Every other
# channel, a new one too, is a term beyond plain causal attention.
NOT_TERMS = frozenset({"query_scale", "whole_matrix", "bias_gradient"})


@dataclass(frozen=True)
class AttentionInputs:
    """Everything a strategy's `can_run` and `memory_bytes` read, and all `auto` decides from: the run's
    side, and the method's side as the channels this forward has (needs.py's names)."""
    run: RunShape
    # The method's channels (pe.channels) with this forward's tables: "query_terms" only where no table was
    # given at these positions, "bias_table", "weight", and "bias_gradient" for a bias that takes a gradient.
    channels: frozenset
    pairwise_bytes: int     # pe.pairwise_bytes(needs_grad): what pe.pairwise allocates per (query, key) pair
    score_bytes: int        # pe.score_bytes(): what a score rewrite or normaliser allocates per pair, head and sequence
    options: Any = None     # the method's options, read by a strategy that needs a fact of its own (fla_kernels.py)

    def has(self, channel: str) -> bool:
        return channel in self.channels

    @property
    def has_terms(self) -> bool:
        """Anything beyond causal attention: a bias or weight, terms pe.pairwise builds, per-token terms or
        a rewrite of the scores."""
        return bool(self.channels - NOT_TERMS)

    def with_run(self, **changes) -> "AttentionInputs":
        """These inputs with some of the run's side replaced (the estimate at another length, the same forward
        on CUDA)."""
        return replace(self, run=replace(self.run, **changes))

    @property
    def mask_rows(self) -> int:
        """How many rows a mask built for this forward has: one per sequence with documents, else one shared."""
        return self.run.batch if self.run.documents else 1

    def score_edit_bytes(self, queries: int, keys: int) -> int:
        """What pe.modify_scores, pe.normalise or a layer channel's dot products allocate for `queries` x `keys`
        pairs of every head and sequence (0 without): the method's score_bytes, and what the dot products of a
        channel that replaces q . k keep per (query, key) pair (written_out.DOT_PRODUCTS' count), in fp32 or wider."""
        run = self.run
        per_pair = self.score_bytes if self.channels & {"score_rewrite", "normaliser"} else 0
        for channel in self.channels & DOT_PRODUCTS.keys():
            per_pair += DOT_PRODUCTS[channel].numbers_per_pair(run.head_dim, run.needs_grad) * max(run.element_size, 4)
        return run.batch * run.heads * queries * keys * per_pair

    @property
    def qkv_bytes(self) -> int:
        """Bytes of one of q, k and v: what a strategy's copy of one of them costs."""
        run = self.run
        return run.batch * run.heads * run.length * run.head_dim * run.element_size

    @classmethod
    def describe(cls, pe, positions: torch.Tensor, bias_table, weight_table, *, window: int | None, block_size: int,
                 needs_grad: bool, dropout_p: float, dtype: torch.dtype, batch: int,
                 documents: bool = False, sink: bool = False) -> "AttentionInputs":
        """From the positional module, the tables it returned for this forward (None, None for a method whose
        terms here read the query position) and the run's side."""
        run = RunShape(device_type=positions.device.type, length=positions.shape[0], batch=batch, heads=pe.num_heads,
                       head_dim=pe.head_dim, qk_head_dim=pe.qk_head_dim, element_size=dtype.itemsize, block_size=block_size,
                       needs_grad=needs_grad, dropout_p=dropout_p, windowed=window is not None, documents=documents,
                       consecutive=consecutive(positions))
        by_distance = terms_by_distance(pe, bias_table)
        learnable = (bias_table.requires_grad if by_distance and bias_table is not None
                     else not by_distance and any(p.requires_grad for p in pe.parameters()))
        forward = {"query_terms": not by_distance, "bias_table": bias_table is not None,
                   "weight": has_weight(pe, positions, weight_table, by_distance), "bias_gradient": learnable,
                   "sink": sink}
        channels = (pe.channels - {"query_terms"}) | {name for name, present in forward.items() if present}
        if sink and "normaliser" in channels:
            raise NeoXArgsError("attention-sink is set, but this positional method replaces the softmax with its own "
                                "weights, which have no log-sum-exp for the sink to take its share of. Remove "
                                "attention-sink for this method.")
        return cls(run=run, channels=frozenset(channels), pairwise_bytes=pe.pairwise_bytes(run.needs_grad),
                   score_bytes=pe.score_bytes(), options=pe.options)


def terms_by_distance(pe, bias_table) -> bool:
    """This forward's terms depend on i - j alone: the method's always do, or it gave a table for these
    positions (pe.distance_tables_at: fire below its threshold)."""
    return "query_terms" not in pe.channels or bias_table is not None


def has_weight(pe, positions, weight_table, by_distance: bool) -> bool:
    """A forward whose terms depend on the distance alone has a weight when the method returns a weight
    table; a method whose terms pe.pairwise builds is asked for one pair (so no path ever drops a weight
    it did not expect)."""
    if by_distance:
        return weight_table is not None
    with torch.no_grad():
        return pe.pairwise(positions[:1], positions[:1])[1] is not None
