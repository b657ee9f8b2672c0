"""Causal self-attention with a positional method's score terms: one answer, several strategies.

Every strategy computes, per head h, query i and key j <= i (and i - j < W when `attention_window` is W):

    softmax_j( (q_i . k_j / sqrt(D)) * weight[h, i, j] + bias[h, i, j] ) . v_j

where bias/weight come from the positional method (either may be absent; `weight` exists only for
methods that rescale the scores). The distance is d = positions[i] - positions[j]. With packed documents
masked (reset-attention-mask), key j must also lie in query i's document: each row of the batch then
has its own mask (AttentionPlan.visible), which every strategy but the Toeplitz row applies.

Each strategy is a small class, one file each (registry.py lists them by path):

- `sdpa` path (sdpa.py; the reference, and the fastest where it fits): the [H, L, L] terms written
  out once per forward as one additive mask and SDPA's fused kernels (`Sdpa`), or the softmax
  written out for a method with a weight (`SdpaWrittenOut`). Memory grows with L^2.
- `flex` path (flex.py): compiled FlexAttention reading the per-distance tables [H, L].
- `blocked` path: queries in blocks, each gathering its slice of the terms (blocked.py, any method,
  any device, O(H * block * L)); for per-token terms alone (fox) on CPU, the flash kernel per block
  with F's gradient on the side (token_terms.py, O(b * H * block * L)); on CPU for a distance-only method at consecutive positions, one
  strided row per head and nothing materialised (toeplitz.py, O(H * L)); for one with a weight,
  without gradients, the written-out softmax reading its weight and bias from such rows
  (`ToeplitzWrittenOut`, toeplitz.py, O(H * 64 * L)).
- a learnable bias table's gradient on the side, for the `sdpa` mask, the Toeplitz row and the
  gathered blocks (learnable_table.py, megatron/model/attention/table_gradient.py); for a learnable bias with a
  learnable weight, their Toeplitz rows with the softmax written out a block of queries at a time and
  recomputed in the backward (megatron/model/attention/weighted_table_attention.py).
A method that replaces the softmax (pe.normalise: stickbreaking) or transforms the keys by the tokens in
between (pe.key_transforms: path, its dot products in householder.py) runs only on the strategies that
write the scores out (`sdpa_written_out`, `blocked`) and the cached step; every other one refuses (needs.py).
The KV cache's decoding step is one more (cached.py; the storage is megatron/model/kv_cache.py). Which strategy a forward
takes (`attention-impl`, `auto`'s rule) is megatron/model/attention/choice.py's job; attention never
names a positional method.

`plan_attention` runs once per model forward (per positional module): it picks the strategy and
computes the tables, or the `sdpa` mask, once, so every layer shares them; `attend` runs it.
"""
import torch

from megatron.model.attention.blocked import Blocked
from megatron.model.attention.flex import FLEX_BLOCK, Flex, flex_block_mask, pad_to_whole_tiles
from megatron.model.attention.inputs import AttentionInputs, AttentionRun, RunShape
from megatron.model.attention.masks import (additive_mask, allowed_keys, distance_mask,
                                            gather_by_distance)
from megatron.model.attention.strategy import AttentionPlan
from megatron.model.attention.toeplitz import TOEPLITZ_BLOCK, Toeplitz
from megatron.model.attention.choice import choose_strategy, forced_strategy, memory_budget_bytes
from megatron.model.attention.config import check_attention_sizes

__all__ = ["AttentionPlan", "AttentionInputs", "AttentionRun", "RunShape", "plan_attention", "attend", "Blocked", "Flex", "Toeplitz",
           "FLEX_BLOCK", "TOEPLITZ_BLOCK", "flex_block_mask", "pad_to_whole_tiles", "additive_mask", "allowed_keys",
           "distance_mask", "gather_by_distance"]


def plan_attention(pe, positions: torch.Tensor, run: AttentionRun, *, strategy: str | None = None) -> AttentionPlan:
    """Choose the strategy for this forward and compute what it reads from the positional method.

    `run`: what the run asks (AttentionRun: attention-impl, the window, sizes, dtype, gradients, dropout, the
    packed documents and per-row positions); its dtype and batch only size the memory estimate and the mask,
    so the strategy is the same for every layer. With `run.row_positions` [b, s] (reset-position-ids: they step
    by 1 inside each document), `positions` is the index 0..s-1 (AttentionPlan). `strategy`: one strategy by
    name in place of `run.impl`'s choice (the strategy tests), StrategyCannotRun with its own reason where it
    cannot run."""
    check_attention_sizes(run.window, run.block_size, run.memory_budget_mb)
    span = int(positions.max() - positions.min()) + 1  # s for the usual positions 0..s-1
    bias_table, weight_table = pe.distance_tables_at(positions, span) or (None, None)
    inputs = AttentionInputs.describe(pe, positions, bias_table, weight_table, window=run.window,
                                      block_size=run.block_size, needs_grad=run.needs_grad, dropout_p=run.dropout_p,
                                      dtype=run.dtype, batch=run.batch, documents=run.documents is not None,
                                      sink=run.sink)
    if strategy is None:
        chosen = choose_strategy(run.impl, inputs, memory_budget_bytes(positions.device, run.memory_budget_mb))
    else:
        chosen = forced_strategy(strategy, inputs)
    plan = chosen(pe, positions, window=run.window, block_size=run.block_size, span=span, dtype=run.dtype,
                  bias_table=bias_table, weight_table=weight_table, documents=run.documents,
                  row_positions=run.row_positions)
    if run.flex_kernel_options:
        plan.kernel_options = dict(run.flex_kernel_options)  # read by the flex strategy only
    return plan


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, dropout_p: float = 0.0):
    """q, k, v [b, H, s, D] -> [b, H, s, D] along the plan's strategy."""
    return plan.attend(q, k, v, dropout_p)
