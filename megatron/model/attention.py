"""Causal self-attention with a positional method's score terms: one answer, three ways to compute it.

Every path computes, per head h, query i and key j <= i (and i - j < W when `attention_window` is W):

    softmax_j( (q_i . k_j / sqrt(D)) * weight[h, i, j] + bias[h, i, j] ) . v_j

where bias/weight come from the positional method (either may be absent; `weight` exists only for
methods that rescale the scores). The distance is d = positions[i] - positions[j].

- `sdpa` (the reference, and the fastest): the [H, L, L] terms written out once per forward as one
  additive mask, and `scaled_dot_product_attention`'s fused kernels (or the softmax written out when
  there is a weight, which SDPA cannot apply). Memory grows with L^2.
- `flex`: compiled FlexAttention whose `score_mod` reads the per-distance tables `[H, L]`, with a
  block mask for causality and the window. Only for methods whose terms depend on d alone. torch
  has no FlexAttention backward on CPU, so on CPU it runs only without gradients, and there the
  compiled kernel is checked against torch's eager math before its numbers are used (flex_kernel.py).
- `blocked`: queries in blocks of `attention_block_size`; each block gathers its slice of the terms
  (from the tables, or from `pe.pairwise` for methods that depend on i itself) and calls SDPA.
  With gradients each block is recomputed in the backward pass, so memory stays O(H * block * L).
  On CPU a distance-only method without a weight gathers nothing: each block's terms are a strided
  view of one row per head (attend_toeplitz), memory O(H * L), faster than `sdpa`.

Which path a forward takes (`attention-impl`, `auto`'s rule) is attention_choice.py's job.
`plan_attention` runs once per model forward (per positional module): it picks the path and
computes the tables, or the `sdpa` path's mask, once, so every layer shares them.
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask
from torch.utils.checkpoint import checkpoint

from megatron.model.attention_config import check_attention_sizes
from megatron.model import cpu_flash
from megatron.model.attention_choice import choose_path, memory_budget_bytes, sdpa_bytes
from megatron.model.flex_kernel import run_flex
from megatron.model.table_gradient import attend_with_table


@dataclass
class AttentionPlan:
    """The path chosen for one forward and the positional inputs it needs, computed once."""
    path: str                          # "sdpa" | "flex" | "blocked"
    pe: torch.nn.Module                # the positional module (layers call pe.rotate_qk)
    positions: torch.Tensor            # LongTensor [s]
    window: int | None
    block_size: int
    span: int                          # largest distance any query sees, + 1
    mask: torch.Tensor | None = None         # sdpa: [1, H | 1, s, s] additive, -inf where hidden; None = plain causal
    bias: torch.Tensor | None = None         # sdpa with a weight (written-out softmax): [H, s, s]
    weight: torch.Tensor | None = None       #   [H, s, s]
    allowed: torch.Tensor | None = None      #   bool [s, s]
    bias_table: torch.Tensor | None = None   # flex/blocked, distance-only methods: [H, span]
    weight_table: torch.Tensor | None = None
    block_mask: BlockMask | None = None      # flex
    row: torch.Tensor | None = None          # blocked, CPU, consecutive positions: [H | 1, 2s - 1]
    table_grad: bool = False                 # sdpa/blocked: learnable bias table through table_gradient.py


def plan_attention(pe, positions: torch.Tensor, *, impl: str, window: int | None, block_size: int,
                   needs_grad: bool, dropout_p: float, dtype: torch.dtype = torch.float32, batch: int = 1,
                   memory_budget_mb: int | None = None) -> AttentionPlan:
    """Choose the path for this forward and compute what it reads from the positional method.

    `dtype`: the dtype of q, k and v (the `sdpa` path's mask is built in it); `batch`: sequences per
    forward; both only size the memory estimate and the mask, so the path is the same for every layer."""
    check_attention_sizes(window, block_size, memory_budget_mb)
    length = positions.shape[0]
    span = int(positions.max() - positions.min()) + 1  # s for the usual positions 0..s-1
    bias_table = weight_table = None
    if pe.distance_only:
        bias_table, weight_table = pe.distance_tables(span)
    has_score_terms = not pe.distance_only or bias_table is not None or weight_table is not None
    has_weight = weight_table is not None
    # A bias table that needs a gradient, with no weight or dropout: fused SDPA with the bias as a
    # constant and the table's gradient on the side (table_gradient.py), not SDPA's math kernel.
    table_grad = (needs_grad and dropout_p == 0 and not has_weight and bias_table is not None
                  and bias_table.requires_grad)
    bias_needs_grad = (bias_table is not None and bias_table.requires_grad
                       or not pe.distance_only and any(p.requires_grad for p in pe.parameters()))
    estimate = sdpa_bytes(
        length=length, heads=pe.num_heads if has_score_terms else 1, batch=batch,
        element_size=dtype.itemsize,
        pairwise_bytes=pe.pairwise_bytes() if has_weight or not pe.distance_only else 0,
        writes_scores=has_weight or (needs_grad and bias_needs_grad and not table_grad), needs_grad=needs_grad)
    path = choose_path(impl, distance_only=pe.distance_only, has_score_terms=has_score_terms,
                       windowed=window is not None, device_type=positions.device.type, needs_grad=needs_grad,
                       dropout_p=dropout_p, has_weight=has_weight, sdpa_estimate=estimate,
                       budget=memory_budget_bytes(positions.device, memory_budget_mb))
    plan = AttentionPlan(path, pe, positions, window, block_size, span, table_grad=table_grad and path != "flex")
    # What the mask or row is built from: with table_grad a constant (its gradient comes on the side).
    constant_table = bias_table.detach() if plan.table_grad else bias_table
    if path == "sdpa" and (has_score_terms or window is not None):
        if pe.distance_only and not has_weight:
            plan.mask = distance_mask(constant_table, positions, window, dtype)
        else:
            allowed = allowed_keys(positions, positions, torch.arange(length, device=positions.device), window)
            bias, weight = pe.pairwise(positions, positions)
            if weight is None:
                plan.mask = additive_mask(bias, allowed, dtype)
            else:  # the softmax is written out per layer (attend_materialised)
                plan.bias, plan.weight, plan.allowed = bias, weight, allowed
    if path != "sdpa" or plan.table_grad:
        plan.bias_table, plan.weight_table = bias_table, weight_table
    if (path == "blocked" and positions.device.type == "cpu" and pe.distance_only and not has_weight
            and dropout_p == 0 and (plan.table_grad or bias_table is None or not bias_table.requires_grad)
            and consecutive(positions)):
        plan.row = distance_row(constant_table, length, window, dtype, positions.device)
    if path == "flex":
        plan.block_mask = flex_block_mask(positions, window, span)
    return plan


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, plan: AttentionPlan, dropout_p: float = 0.0):
    """q, k, v [b, H, s, D] -> [b, H, s, D] along the plan's path."""
    if plan.path == "sdpa" and plan.weight is not None:
        return attend_materialised(q, k, v, plan.bias, plan.weight, plan.allowed, dropout_p)
    if plan.path == "sdpa":
        mask = plan.mask
        if mask is not None and mask.dtype != q.dtype:  # planned for another dtype: right, at one copy a layer
            mask = mask.to(q.dtype)
        if plan.table_grad:
            return attend_with_table(q, k, v, plan.bias_table, plan.positions, plan.positions, None, mask,
                                     causal=True)
        return attend_masked(q, k, v, mask, dropout_p)
    if plan.path == "flex":
        return attend_flex(q, k, v, plan)
    return attend_blocked(q, k, v, plan, dropout_p)


def attend_masked(q, k, v, mask, dropout_p):
    """Attention of the `sdpa` path: a square [1, H | 1, s, s] additive mask (None: plain causal)."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    if q.device.type == "cpu" and dropout_p == 0 and not mask.requires_grad:
        return cpu_flash.attention(q, k, v, mask, causal=True)[0]  # skips the future key blocks
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


def consecutive(positions) -> bool:
    """positions p0, p0 + 1, ...: every (query, key) term then depends on i - j alone."""
    return bool((positions.diff() == 1).all())


def distance_row(table, length, window, dtype, device):
    """[H | 1, 2L - 1] in `dtype`, for consecutive positions: at index i - j + L - 1 the term of query i
    and key j, table[h, i - j] where 0 <= i - j (< window), -inf elsewhere (future keys, beyond the
    window). table [H, >= L] or None (no terms: zeros)."""
    heads = 1 if table is None else table.shape[0]
    visible = length if window is None else min(window, length)
    row = torch.full((heads, 2 * length - 1), float("-inf"), dtype=dtype, device=device)
    row[:, length - 1:length - 1 + visible] = 0 if table is None else table[:, :visible].to(dtype)
    return row


def distance_mask(table, positions, window, dtype):
    """The `sdpa` path's [1, H | 1, L, L] mask for a distance-only method: table[h, d] in `dtype`
    where key j is visible to query i, -inf elsewhere; table [H, span] or None (no terms: zeros).

    For consecutive positions (the usual case: any start) it is distance_row seen as a Toeplitz
    matrix and copied out once: on CPU about 4x faster than gathering by an [L, L] distance index
    and masking it (L = 2048, 8 heads: 0.2 s against 0.9 s), and no [L, L] index at all. Other
    positions gather."""
    length = positions.shape[0]
    if not consecutive(positions):
        allowed = allowed_keys(positions, positions, torch.arange(length, device=positions.device), window)
        if table is None:
            return additive_mask(None, allowed, dtype)
        return additive_mask(gather_by_distance(table.to(dtype), positions, positions), allowed, dtype)
    row = distance_row(table, length, window, dtype, positions.device)
    # unfold: [H, L, L] with [h, i, j'] = row[h, i + j']; flipping j' = L - 1 - j gives row[h, i - j + L - 1].
    return row.unfold(1, length, 1).flip(-1)[None]


def additive_mask(bias, allowed, dtype):
    """bias [H, q, k] | None, bool allowed [q, k] -> [1, H | 1, q, k] in `dtype`, -inf where not allowed."""
    if bias is None:
        bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return fused_mask(bias.to(dtype).masked_fill(~allowed, float("-inf")))


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


TOEPLITZ_BLOCK = 128  # queries per kernel call of attend_toeplitz (it holds no [block, L] tensor)


def attend_toeplitz(q, k, v, plan: AttentionPlan):
    """The `blocked` path on CPU for a distance-only method at consecutive positions: no term is
    materialised. With the keys in reverse order, a block's terms row[h, i - j + L - 1] have strides
    (1, 1) in (query, reversed key), so each block's mask is a strided view of plan.row, handed to
    the flash kernel (cpu_flash.py) with the keys up to the block's last query. Memory O(H * L); one
    thread, 8 heads of 32 dims, one sequence: 3.5 / 12 / 45 ms at L = 512 / 1024 / 2048, against 4.6 /
    14 / 46 for causal attention without terms and 5.4 / 18 / 58 for the `sdpa` path's call."""
    length, row = q.shape[2], plan.row.to(q.dtype)  # [H, 2L - 1]: a copy only if planned for another dtype
    k_reversed, v_reversed = k.flip(2), v.flip(2)
    k_positions = plan.positions.flip(0)
    outputs = []
    for start in range(0, length, TOEPLITZ_BLOCK):
        end = min(start + TOEPLITZ_BLOCK, length)
        # [1, H, query start + a, key end - 1 - c] = row[h, start + a - (end - 1 - c) + L - 1]
        mask = row.as_strided((1, row.shape[0], end - start, end), (0, row.stride(0), 1, 1),
                              row.storage_offset() + start - end + length)
        keys = slice(length - end, length)
        if plan.table_grad:
            out = attend_with_table(q[:, :, start:end], k_reversed[:, :, keys], v_reversed[:, :, keys],
                                    plan.bias_table, plan.positions[start:end], k_positions[keys], None, mask)
        else:
            out = cpu_flash.attention(q[:, :, start:end], k_reversed[:, :, keys], v_reversed[:, :, keys], mask,
                                      causal=False)[0]
        outputs.append(out)
    return torch.cat(outputs, dim=2)


def attend_blocked(q, k, v, plan: AttentionPlan, dropout_p):
    if plan.row is not None:
        return attend_toeplitz(q, k, v, plan)
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
    out = run_flex(q, k, v, add_score_terms, plan.block_mask)  # on CPU: checked against torch's eager math
    return out[:, :, :length]
