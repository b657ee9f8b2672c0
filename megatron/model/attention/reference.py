"""The attention of the positional protocol written out the slow, obvious way: the oracle every strategy
is tested against (tests/model/attention/test_strategies.py) and the attention of the exported Hugging
Face decoder (tools/ckpts/hf_export copies this file into the export, beside the method's files).

Per head h, query i and key j, with rotated q and k (`pe.rotate_qk`) and the method's terms for those
positions (`pe.pairwise` -> bias, weight; `pe.token_terms` -> g, F = cumsum(g)):

    logits[h, i, j] = t[h, i] * ((q_i . k_j / sqrt(D)) * weight[h, i, j] + bias[h, i, j]) + F[h, i] - F[h, j]
    out_i = softmax_j(logits[h, i, j] over the keys visible to i) . v_j

with t = `pe.query_scale(n)` (1 without one; ssmax: n_i the keys visible to query i), or, for a method
that rewrites the score matrix (its score_rewrite channel, `pe.modify_scores`: cope, a dape wrapper), the softmax
of what it makes of the scores (q_i . k_j / sqrt(D)) * weight and the bias (F_i - F_j included). A method
with the normaliser channel (stickbreaking) gives the weights itself (`pe.normalise`, in place of softmax_j);
one with key transforms (`pe.key_transforms`: path) has q_i . k_j replaced by q_i^T H_i ... H_{j+1} k_j,
H_t = I - beta_t w_t w_t^T (D x D matrices, multiplied out for each query below).
Key j is visible to query i when j <= i (by index), i - j < the window (by position) when there is one,
and both lie in the same packed document when documents are masked. Every [q, k] matrix is written out
whole, in the wider of q's dtype and float32; nothing is fused, blocked or cached.

Imports torch alone: the export carries this file and the positional package's files, nothing else.
"""
import math

import torch


def visible_keys(q_positions, k_positions, q_index, k_index, window=None, q_documents=None, k_documents=None):
    """bool [q, k] (or [b, q, k] with documents [b, q] / [b, k]): key j is visible to query i."""
    visible = k_index[None, :] <= q_index[:, None]
    if window is not None:
        visible = visible & (q_positions[:, None] - k_positions[None, :] < window)
    if q_documents is not None:
        visible = visible & (q_documents[:, :, None] == k_documents[:, None, :])
    return visible


def token_term_differences(F, K=None):
    """F_i - F_j [b, H, q, k] from F [b, H, q] of the queries and K [b, H, k] of the keys (default F)."""
    return F[..., :, None] - (F if K is None else K)[..., None, :]


def householder_dot_products(q, k, w, beta):
    """q [b, H, n, D] (the last n of the m keys' positions), k, w [b, H, m, D], beta [b, H, m] -> [b, H, n, m]:
    q_i^T H_i H_{i-1} ... H_{j+1} k_j for j <= i (a value the mask removes for later keys). The plainest
    form that is not O(L^2) Python steps: every query carried back over the keys one at a time, taking
    each key's H_j (a rank-one update) once it has passed its own position: m steps of O(b H n D). (The
    strategies chunk the keys instead, householder.py; the tests tie both to the D x D products.)"""
    n, m = q.shape[2], k.shape[2]
    w, beta = w.to(q.dtype), beta.to(q.dtype)
    rows = torch.arange(m - n, m, device=q.device)[:, None]  # [n, 1]: each query's position
    state, columns = q, [None] * m
    for j in range(m - 1, -1, -1):
        columns[j] = state @ k[:, :, j, :, None]  # [b, H, n, 1]
        if j > 0:  # H_j reaches the queries at or after it, before they meet key j - 1
            state = state - (state @ w[:, :, j, :, None]) * beta[:, :, j, None, None] * (rows >= j) * w[:, :, j, None, :]
    return torch.cat(columns, dim=-1)


def decayed_dot_products(q, k, P):
    """q [b, H, n, D] (the last n of the m keys' positions), k [b, H, m, D], P = cumsum(g) [b, H, m, D] of the
    keys' tokens (pe.channel_decays: wall) -> [b, H, n, m]: sum_D q_i k_j exp(P_i - P_j) for j <= i, each
    query's row written out per (key, channel): O(m D) per query, and exp of a difference, never of P alone
    (which overflows at long lengths). Later keys get exponent 0 (a value the mask removes)."""
    n, m = q.shape[2], k.shape[2]
    P = P.to(q.dtype)
    rows = []
    for i in range(m - n, m):
        exponent = (P[:, :, i, None] - P).masked_fill((torch.arange(m, device=q.device) > i)[:, None], 0)
        rows.append((q[:, :, i - (m - n), None] * k * exponent.exp()).sum(-1))
    return torch.stack(rows, dim=2)


def attend(q, k, v, pe, q_positions, k_positions, visible, *, bias=None, weight=None, finite_mask: bool = False,
           sink=None, token_terms=None, key_transforms=None, channel_decays=None):
    """q [b, H, q, D], k, v [b, H, k, D] (q and k already rotated) -> [b, H, q, D] in v's dtype.

    pe: the positional method (None: no method, only `bias`); bias, weight: the method's terms for these
    positions (pe.pairwise), broadcastable to [b, H, q, k], or None; positions [q], [k] (or [b, q], [b, k]:
    what pe.modify_scores reads); visible: bool broadcastable to [b, H, q, k]. An invisible key's logit is
    -inf, or with `finite_mask` the dtype's minimum (a padding query that sees no key then gets a uniform row,
    not NaN); sink: s [H], one more logit per head and query whose column takes its share of the softmax and
    is dropped (a learnable attention sink), or None.

    The layer channels' values (base.py's CHANNELS, keyword by channel; each None when the method has none), of
    the keys' tokens, the queries being the last q of them, as running sums where the scores read those
    (pe.reads_running_sum): token_terms: F = cumsum(g) [b, H, k] (pe.token_terms); key_transforms: (w [b, H, k, D],
    beta [b, H, k]) (pe.key_transforms); channel_decays: P = cumsum(g) [b, H, k, D] (pe.channel_decays)."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    q, k = q.to(dtype), k.to(dtype)
    token_differences = None
    if token_terms is not None:  # F_i - F_j of the queries (the last q keys) and the keys
        token_differences = token_term_differences(token_terms[..., -q.shape[2]:], token_terms)
    if channel_decays is not None:
        scores = decayed_dot_products(q, k, channel_decays) / math.sqrt(q.shape[-1])
    elif key_transforms is None:
        scores = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
    else:
        w, beta = (t.to(dtype) for t in key_transforms)
        scores = householder_dot_products(q, k, w, beta) / math.sqrt(q.shape[-1])
    if weight is not None:
        scores = scores * weight.to(dtype)
    if pe is not None and "query_scale" in pe.channels:  # t_i times query i's row, n_i = its visible keys
        visible_count = visible.sum(-1).reshape(visible.shape[0], -1, visible.shape[-2])[:, 0]  # [b | 1, q]
        scale = pe.query_scale(visible_count).to(dtype)[..., None]
        scores = scores * scale
        bias = None if bias is None else bias.to(dtype) * scale
    if token_differences is not None:
        token_differences = token_differences.to(dtype)
        bias = token_differences if bias is None else bias.to(dtype) + token_differences
    if pe is not None and "score_rewrite" in pe.channels:
        scores = pe.modify_scores(scores, bias, q, k, q_positions, k_positions, visible)
    elif bias is not None:
        scores = scores + bias.to(dtype)
    scores = scores.masked_fill(~visible, torch.finfo(dtype).min if finite_mask else float("-inf"))
    if sink is not None and pe is not None and "normaliser" in pe.channels:
        raise ValueError("a learnable sink takes its share of a softmax, and this method replaces the softmax")
    if sink is not None:  # the sink's column beside the keys' logits, in the softmax, then dropped
        column = sink.to(dtype)[:, None, None].expand(*scores.shape[:-1], 1)
        weights = torch.cat([scores, column], dim=-1).softmax(dim=-1)[..., :-1]
    else:
        weights = pe.normalise(scores, visible, q_positions, k_positions) if pe is not None else scores.softmax(dim=-1)
    return (weights @ v.to(dtype)).to(v.dtype)


def attention(q, k, v, pe, positions, *, window=None, documents=None, row_positions=None, sink=None,
              **layer_values):
    """One forward over whole sequences: q, k, v [b, H, s, D] (not yet rotated) -> [b, H, s, D].

    positions [s]: the tokens' positions (the sequence index for packed rows); row_positions [b, s]: each
    row's own (restarting in each document), read by the method in place of `positions`; documents [b, s]:
    each token's packed document (keys of other documents invisible); sink: the layer's sink logits s [H] (a
    learnable attention sink), or None; layer_values: the layer's values by channel (pe.layer_values: g
    [b, H, s, ...] or a tuple of such, None where the method has none), summed over the tokens where the scores
    read running sums. Each row is computed alone."""
    index = torch.arange(q.shape[2], device=q.device)
    work = torch.promote_types(q.dtype, torch.float32)
    rows = []
    for r in range(q.shape[0]):
        p = positions if row_positions is None else row_positions[r]
        q_r, k_r = pe.rotate_qk(q[r:r + 1], k[r:r + 1], p, p)
        own = None if documents is None else documents[r:r + 1]
        visible = visible_keys(p, p, index, index, window, own, own)
        bias, weight = pe.pairwise(p, p)
        values = {channel: (value[r:r + 1].to(work).cumsum(dim=2) if pe.reads_running_sum(channel)
                            else tuple(t[r:r + 1] for t in value) if isinstance(value, tuple) else value[r:r + 1])
                  for channel, value in layer_values.items() if value is not None}
        rows.append(attend(q_r, k_r, v[r:r + 1], pe, p, p, visible.reshape(1, 1, *visible.shape[-2:]),
                           bias=bias, weight=weight, sink=sink, **values))
    return torch.cat(rows)
