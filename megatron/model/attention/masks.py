"""The masks that several attention strategies share."""

import torch


def consecutive(positions) -> bool:
    """positions p0, p0 + 1, ...: every (query, key) term then depends on i - j alone."""
    return bool((positions.diff() == 1).all())


def allowed_keys(q_positions, k_positions, q_index, window):
    """bool [q, k]: key j is visible to query i (causal by sequence index, window by distance).

    `q_index` is each query's index in the sequence; keys are indexed 0..k-1."""
    k_index = torch.arange(k_positions.shape[0], device=k_positions.device)
    allowed = k_index[None, :] <= q_index[:, None]
    if window is not None:
        allowed = allowed & (q_positions[:, None] - k_positions[None, :] < window)
    return allowed


def same_document(documents, q_slice: slice, k_slice: slice):
    """bool [b, 1, q, k]: query and key lie in the same packed document. documents [b, s]: each token's
    document id (megatron/data/packed_documents.py), nondecreasing along a row."""
    return (documents[:, q_slice, None] == documents[:, None, k_slice])[:, None]


def keys_seen(positions, window, documents=None):
    """float32 [b | 1, s]: how many keys each query sees (the n of attention-temperature's ssmax): the keys
    up to it by index, in its own packed document (documents [b, s], ids nondecreasing along a row) and
    within `window` positions of it. Positions ascend (the index, or random-positions' sorted draws), so a
    query's visible keys are one run first..i: O(s log s), nothing [s, s]."""
    index = torch.arange(positions.shape[0], device=positions.device)
    if not bool((positions.diff() > 0).all()):  # positions that do not ascend: count the visible keys
        allowed = allowed_keys(positions, positions, index, window)
        if documents is not None:
            allowed = allowed & (documents[:, :, None] == documents[:, None, :])
        return allowed.sum(-1).float().reshape(-1, positions.shape[0])
    first = torch.zeros_like(index) if window is None else torch.searchsorted(positions, positions - window,
                                                                             right=True)
    first = first[None]
    if documents is not None:  # each token's document starts at the last index where the id changed
        starts = torch.ones_like(documents, dtype=torch.bool)
        starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
        first = torch.maximum(first, (index * starts).cummax(dim=1).values)
    return (index + 1 - first).float()


def gather_by_distance(table, q_positions, k_positions):
    """table [H, span] -> [H, q, k] at d = clamp(q_pos - k_pos, 0) (masked entries read d = 0)."""
    if table is None:
        return None
    distance = (q_positions[:, None] - k_positions[None, :]).clamp(min=0)
    return table[:, distance]


def fused_mask(mask):
    """A mask SDPA's fused kernels accept: 4-D [b | 1, H | 1, q, k] and contiguous.

    SDPA falls back to its unfused math kernel for a 3-D or non-contiguous (e.g. expanded) mask:
    about 4x the time of causal attention on CPU at L = 512 instead of about 1.1x (issue 12)."""
    while mask.dim() < 4:
        mask = mask[None]
    return mask.contiguous()


def additive_mask(bias, allowed, dtype):
    """bias [b | 1, H, q, k] | [H, q, k] | None, bool allowed [q, k] | [b, 1, q, k] -> [b | 1, H | 1, q, k]
    in `dtype`, -inf where not allowed."""
    if bias is None:
        bias = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return fused_mask(bias.to(dtype).masked_fill(~allowed, float("-inf")))


def distance_row(table, length, window, dtype, device):
    """[H | 1, 2L - 1] in `dtype`, for consecutive positions: at index i - j + L - 1 the term of query i
    and key j, table[h, i - j] where 0 <= i - j (< window), -inf elsewhere (future keys, beyond the
    window). table [H, >= L] or None (no terms: zeros)."""
    heads = 1 if table is None else table.shape[0]
    visible = length if window is None else min(window, length)
    row = torch.full((heads, 2 * length - 1), float("-inf"), dtype=dtype, device=device)
    row[:, length - 1:length - 1 + visible] = 0 if table is None else table[:, :visible].to(dtype)
    return row


def row_view(row, start: int, end: int, length: int):
    """row [H | 1, 2L - 1] -> the terms of queries start..end-1 and keys end-1, ..., 0 (in reverse
    order): [H | 1, end - start, end], at [h, a, c] row[h, start + a - (end - 1 - c) + L - 1]. A view."""
    return row.as_strided((row.shape[0], end - start, end), (row.stride(0), 1, 1),
                          row.storage_offset() + start - end + length)


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


def token_term_differences(F, q_slice: slice, k_slice: slice):
    """F [b, H, s] (cumulative per-token terms) -> F_i - F_j [b, H, q, k] for queries q_slice and keys
    k_slice: sum_{l=j+1..i} g_l for j <= i (future keys get positive values; the causal mask removes them)."""
    return F[:, :, q_slice, None] - F[:, :, None, k_slice]
