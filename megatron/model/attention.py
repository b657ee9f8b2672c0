"""Causal self-attention with a positional method's score terms: one answer, three ways to compute it.

Every path computes, per head h, query i and key j <= i (and i - j < W when `attention_window` is W):

    softmax_j( (q_i . k_j / sqrt(D)) * weight[h, i, j] + bias[h, i, j] ) . v_j

where bias/weight come from the positional method (either may be absent; `weight` exists only for
methods that rescale the scores). The distance is d = positions[i] - positions[j].

- `sdpa` (the reference): materialise the [H, L, L] terms with `pe.pairwise` and call
  `scaled_dot_product_attention` (or write the softmax out when there is a weight, which SDPA
  cannot apply). Memory grows with L^2.
- `flex`: compiled FlexAttention whose `score_mod` reads the per-distance tables `[H, L]`, with a
  block mask for causality and the window. Only for methods whose terms depend on d alone. torch
  has no FlexAttention backward on CPU, so on CPU it runs only without gradients.
- `blocked`: queries in blocks of `attention_block_size`; each block gathers its slice of the terms
  (from the tables, or from `pe.pairwise` for methods that depend on i itself) and calls SDPA.
  With gradients each block is recomputed in the backward pass, so memory stays O(H * block * L).

`plan_attention` runs once per model forward (per positional module): it picks the path and
computes the tables or the pairwise terms once, so every layer shares them.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, flex_attention
from torch.utils.checkpoint import checkpoint

from megatron.model.attention_config import ATTENTION_IMPLS, check_window_and_block_size
from megatron.model.table_gradient import attend_with_table
from megatron.neox_arguments import NeoXArgsError


@dataclass
class AttentionPlan:
    """The path chosen for one forward and the positional inputs it needs, computed once."""
    path: str                          # "sdpa" | "flex" | "blocked"
    pe: torch.nn.Module                # the positional module (layers call pe.rotate_qk)
    positions: torch.Tensor            # LongTensor [s]
    window: int | None
    block_size: int
    span: int                          # largest distance any query sees, + 1
    bias: torch.Tensor | None = None         # sdpa: [H, s, s]
    weight: torch.Tensor | None = None       # sdpa: [H, s, s]
    allowed: torch.Tensor | None = None      # sdpa: bool [s, s]; None = plain causal
    bias_table: torch.Tensor | None = None   # flex/blocked, distance-only methods: [H, span]
    weight_table: torch.Tensor | None = None
    block_mask: BlockMask | None = None      # flex
    table_grad: bool = False                 # sdpa/blocked: learnable bias table through table_gradient.py


def flex_can_run(device_type: str, needs_grad: bool, dropout_p: float) -> str | None:
    """Why FlexAttention cannot run here, or None when it can."""
    if device_type == "cpu" and needs_grad:
        return "torch's FlexAttention has no backward pass on CPU"
    if dropout_p > 0:
        return "FlexAttention does not apply attention dropout"
    return None


def choose_path(impl: str, *, length: int, block_size: int, distance_only: bool, has_score_terms: bool,
                windowed: bool, device_type: str, needs_grad: bool, dropout_p: float) -> str:
    """Resolve `attention_impl`; `auto` never returns a path that cannot run here."""
    if impl not in ATTENTION_IMPLS:
        raise NeoXArgsError(f"attention-impl is {impl!r}; choose one of {', '.join(ATTENTION_IMPLS)}.")
    flex_problem = flex_can_run(device_type, needs_grad, dropout_p)
    if impl == "flex":
        if not distance_only:
            raise NeoXArgsError(
                "attention-impl is 'flex', but this positional method's bias depends on the query "
                "position itself, not only on the distance i - j, so it has no per-distance table for "
                "FlexAttention to read. Set attention-impl to 'blocked', 'sdpa' or 'auto'.")
        if flex_problem:
            raise NeoXArgsError(
                f"attention-impl is 'flex', but {flex_problem} (device {device_type}, gradients "
                f"{'needed' if needs_grad else 'not needed'}, attention-dropout {dropout_p}). Set "
                "attention-impl to 'blocked' or 'auto' for this run, or run on a CUDA device.")
    if impl != "auto":
        return impl
    # Without score terms or a window, SDPA's fused causal kernels never build an L x L matrix.
    if length <= block_size or not (has_score_terms or windowed):
        return "sdpa"
    if distance_only and flex_problem is None:
        return "flex"
    return "blocked"


def plan_attention(pe, positions: torch.Tensor, *, impl: str, window: int | None, block_size: int,
                   needs_grad: bool, dropout_p: float) -> AttentionPlan:
    """Choose the path for this forward and compute what it reads from the positional method."""
    check_window_and_block_size(window, block_size)
    length = positions.shape[0]
    span = int(positions.max() - positions.min()) + 1  # s for the usual positions 0..s-1
    bias_table = weight_table = None
    if pe.distance_only:
        bias_table, weight_table = pe.distance_tables(span)
    has_score_terms = not pe.distance_only or bias_table is not None or weight_table is not None
    path = choose_path(impl, length=length, block_size=block_size, distance_only=pe.distance_only,
                       has_score_terms=has_score_terms, windowed=window is not None,
                       device_type=positions.device.type, needs_grad=needs_grad, dropout_p=dropout_p)
    plan = AttentionPlan(path, pe, positions, window, block_size, span)
    # A bias table that needs a gradient, with no weight or dropout: fused SDPA with the bias as a
    # constant and the table's gradient on the side (table_gradient.py), not SDPA's math kernel.
    plan.table_grad = (path != "flex" and needs_grad and dropout_p == 0 and weight_table is None
                       and bias_table is not None and bias_table.requires_grad)
    if path == "sdpa":
        if not plan.table_grad:
            plan.bias, plan.weight = pe.pairwise(positions, positions)
        if has_score_terms or window is not None:
            plan.allowed = allowed_keys(positions, positions, torch.arange(length, device=positions.device), window)
    if path != "sdpa" or plan.table_grad:
        plan.bias_table, plan.weight_table = bias_table, weight_table
    if path == "flex":
        plan.block_mask = flex_block_mask(positions, window, span)
    return plan


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, dropout_p: float = 0.0):
    """q, k, v [b, H, s, D] -> [b, H, s, D] along the plan's path."""
    if plan.path == "sdpa" and plan.table_grad:
        return attend_with_table(q, k, v, plan.bias_table, plan.positions, plan.positions, plan.allowed)
    if plan.path == "sdpa":
        return attend_materialised(q, k, v, plan.bias, plan.weight, plan.allowed, dropout_p)
    if plan.path == "flex":
        return attend_flex(q, k, v, plan)
    return attend_blocked(q, k, v, plan, dropout_p)


def allowed_keys(q_positions, k_positions, q_index, window):
    """bool [q, k]: key j is visible to query i (causal by sequence index, window by distance).

    `q_index` is each query's index in the sequence; keys are indexed 0..k-1."""
    k_index = torch.arange(k_positions.shape[0], device=k_positions.device)
    allowed = k_index[None, :] <= q_index[:, None]
    if window is not None:
        allowed = allowed & (q_positions[:, None] - k_positions[None, :] < window)
    return allowed


def attend_materialised(q, k, v, bias, weight, allowed, dropout_p):
    """Attention with explicit [H, q, k] terms (or none) and a bool [q, k] visibility mask.

    `allowed` None means plain causal attention with no terms: SDPA's fused causal kernels."""
    if allowed is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    if weight is None:
        mask = allowed if bias is None else bias.to(q.dtype).masked_fill(~allowed, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=fused_mask(mask), dropout_p=dropout_p)
    # SDPA cannot multiply the scores, so the softmax is written out (in fp32 for low precisions).
    dtype = torch.promote_types(q.dtype, torch.float32)  # float64 stays float64 (the reference tests)
    scores = (q.to(dtype) @ k.to(dtype).transpose(-1, -2)) / math.sqrt(q.shape[-1])  # [b, H, q, k]
    scores = scores * weight
    if bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = F.dropout(scores.softmax(dim=-1), p=dropout_p)
    return (probs @ v.to(dtype)).to(v.dtype)


def fused_mask(mask):
    """A mask SDPA's fused kernels accept: 4-D [b | 1, H | 1, q, k] and contiguous.

    SDPA falls back to its unfused math kernel for a 3-D or non-contiguous (e.g. expanded) mask:
    about 4x the time of causal attention on CPU at L = 512 instead of about 1.1x (issue 12)."""
    while mask.dim() < 4:
        mask = mask[None]
    return mask.contiguous()


def gather_by_distance(table, q_positions, k_positions):
    """table [H, span] -> [H, q, k] at d = clamp(q_pos - k_pos, 0) (masked entries read d = 0)."""
    if table is None:
        return None
    distance = (q_positions[:, None] - k_positions[None, :]).clamp(min=0)
    return table[:, distance]


def attend_blocked(q, k, v, plan: AttentionPlan, dropout_p):
    length = q.shape[2]
    outputs = []
    for start in range(0, length, plan.block_size):
        end = min(start + plan.block_size, length)
        if plan.table_grad:  # saves only views of q, k, v and the block's output: no checkpoint needed
            q_positions, k_positions = plan.positions[start:end], plan.positions[:end]
            allowed = allowed_keys(q_positions, k_positions, torch.arange(start, end, device=q.device), plan.window)
            out = attend_with_table(q[:, :, start:end], k[:, :, :end], v[:, :, :end], plan.bias_table,
                                    q_positions, k_positions, allowed)
        elif torch.is_grad_enabled():
            # Recompute the block in the backward pass instead of saving its [H, block, end]
            # probabilities: otherwise the saved tensors of all blocks add up to O(H * L^2).
            out = checkpoint(attend_block, q, k, v, plan, start, end, dropout_p, use_reentrant=False)
        else:
            out = attend_block(q, k, v, plan, start, end, dropout_p)
        outputs.append(out)
    return torch.cat(outputs, dim=2)


def attend_block(q, k, v, plan: AttentionPlan, start, end, dropout_p):
    """Queries start..end-1 against keys 0..end-1 (later keys are masked by causality anyway)."""
    q_positions, k_positions = plan.positions[start:end], plan.positions[:end]
    if plan.pe.distance_only:
        bias = gather_by_distance(plan.bias_table, q_positions, k_positions)
        weight = gather_by_distance(plan.weight_table, q_positions, k_positions)
    else:
        bias, weight = plan.pe.pairwise(q_positions, k_positions)
    q_index = torch.arange(start, end, device=q.device)
    allowed = allowed_keys(q_positions, k_positions, q_index, plan.window)
    return attend_materialised(q[:, :, start:end], k[:, :, :end], v[:, :, :end], bias, weight, allowed, dropout_p)


_compiled_flex_attention = None


def compiled_flex_attention():
    """FlexAttention only avoids the L x L matrix when compiled; compile once per process."""
    global _compiled_flex_attention
    if _compiled_flex_attention is None:
        _compiled_flex_attention = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex_attention


FLEX_BLOCK = 128  # FlexAttention's tile: the block mask says, per tile, "skip", "full" or "apply mask_mod"


def pad_to_whole_tiles(positions):
    """positions [L] -> [L'] with L' the next multiple of FLEX_BLOCK, padded with the last position.

    The flex path always runs on whole tiles: torch 2.13's compiled CPU FlexAttention returns wrong
    numbers (or NaN) for some lengths that end in a partial tile, e.g. L = 8, 24, 40 with 8-float
    AVX2 vectors (docs/known-issues.md). Padded queries are computed and dropped; padded keys sit
    after every real query, so causality already hides them: the real rows are exact."""
    length = positions.shape[0]
    return F.pad(positions, (0, -length % FLEX_BLOCK), value=int(positions[-1]))


def flex_block_mask(positions, window, span):
    """FlexAttention's BlockMask over the whole tiles of `pad_to_whole_tiles(positions)`, for
    causality (by index) and the window (by position distance).

    torch's eager `create_block_mask` evaluates the mask on the whole L x L grid (2.5 GB of
    temporaries at L = 16384) and compiling it costs seconds per length, so the tiles are classified
    here from each tile's position range: O((L / 128)^2) memory, no compilation."""
    padded = pad_to_whole_tiles(positions)
    length = padded.shape[0]
    tiles = length // FLEX_BLOCK
    lowest, highest = padded.view(tiles, FLEX_BLOCK).aminmax(dim=1)
    tile = torch.arange(tiles, device=positions.device)
    causal_full, causal_any = tile[None, :] < tile[:, None], tile[None, :] <= tile[:, None]  # [q tile, kv tile]
    limit = span if window is None else window
    window_full = highest[:, None] - lowest[None, :] < limit  # farthest pair of the tile is visible
    window_any = lowest[:, None] - highest[None, :] < limit   # nearest pair is
    full = causal_full & window_full
    partial = causal_any & window_any & ~full
    limit = torch.tensor(limit, device=positions.device)  # a tensor, so the kernel is not specialised on it

    def visible(b, h, q_idx, kv_idx):
        return (kv_idx <= q_idx) & (padded[q_idx] - padded[kv_idx] < limit)

    def ordered(tiles_mask):  # [q tile, kv tile] bool -> (counts [1, 1, q], kv tile indices [1, 1, q, kv])
        counts = tiles_mask.sum(dim=-1, dtype=torch.int32)
        indices = tiles_mask.to(torch.int32).argsort(dim=-1, descending=True, stable=True).to(torch.int32)
        return counts[None, None], indices[None, None]

    return BlockMask.from_kv_blocks(*ordered(partial), *ordered(full), BLOCK_SIZE=FLEX_BLOCK, mask_mod=visible,
                                    seq_lengths=(length, length))


def attend_flex(q, k, v, plan: AttentionPlan):
    length = q.shape[2]
    positions = pad_to_whole_tiles(plan.positions)
    # Absent terms become neutral tables so every method runs the same compiled score_mod.
    neutral = torch.zeros(q.shape[1], plan.span, device=q.device)  # [H, span]
    # fp32 and contiguous whatever the method returns, so the compiled kernel's guards match too.
    bias_table = neutral if plan.bias_table is None else plan.bias_table.float().contiguous()
    weight_table = neutral + 1 if plan.weight_table is None else plan.weight_table.float().contiguous()

    def add_score_terms(score, b, h, q_idx, kv_idx):
        # Tables are indexed, not captured scalars: gradients reach the kernel parameters robustly.
        distance = (positions[q_idx] - positions[kv_idx]).clamp(min=0)
        return score * weight_table[h, distance] + bias_table[h, distance]

    # Zero-padded to whole tiles (see pad_to_whole_tiles); contiguous, so one memory layout and the
    # compiled kernel is not rebuilt per caller.
    q, k, v = (F.pad(t, (0, 0, 0, positions.shape[0] - length)).contiguous() for t in (q, k, v))
    out = compiled_flex_attention()(q, k, v, score_mod=add_score_terms, block_mask=plan.block_mask)
    return out[:, :, :length]
