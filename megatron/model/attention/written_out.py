"""The written-out attention: one block that applies every channel needing the scores written out, in one
fixed order, for every strategy that writes them out (`sdpa_written_out`, `blocked`, the cached step).

For queries i and keys j of one block (positions bound by the strategy), per head:

1. the dot products q_i . k_j, or with key transforms q_i^T H_i ... H_{j+1} k_j (householder.py), or with channel
   decays sum_n q_in k_jn exp(P_in - P_jn) (decayed_dot_products below), / sqrt(D);
2. times the weight (a weight table, or pe.pairwise's with query terms);
3. plus the bias and the per-token terms F_i - F_j;
4. or, for a score rewrite, what pe.modify_scores makes of the scores and that sum, in place of step 3's add;
5. -inf where key j is not visible to query i;
6. the softmax, or the method's normaliser (pe.normalise) in place of it;
7. attention dropout, and the weights times the values;
8. with a learnable sink (one logit s_h per head in the softmax, its column dropped: GPT-OSS), the output times
   sigmoid(lse_i - s_h), lse_i the log-sum-exp of query i's logits.

Without a weight, a rewrite, a normaliser, transforms or a sink, the bias is SDPA's additive mask and its fused
kernels compute the rest. A new written-out channel is one more step here, at its place in the order, and its
name in WRITTEN_OUT: the strategies that call this block handle what it lists.
"""
import math

import torch
import torch.nn.functional as F

from megatron.model.attention.masks import fused_mask

# The channels only this block computes; every strategy that calls it handles them (sdpa_written_out, blocked).
WRITTEN_OUT = frozenset({"score_rewrite", "normaliser", "key_transforms", "channel_decays", "sink", "sink_off_cpu"})
DECAY_CHUNK = 32  # queries per step of decayed_dot_products: its exact part keeps [b, H, C, C, D]


def decayed_dot_products(q, k, q_decays, k_decays, q_index, k_index, chunk: int = DECAY_CHUNK):
    """Channel decays' dot products (pe.channel_decays: wall): q [b, H, n, D], k [b, H, m, D]; q_decays
    [b, H, n, D], k_decays [b, H, m, D]: P = cumsum(g) at the queries and at the keys; q_index [n], k_index [m]:
    their token indices, ascending -> [b, H, n, m]: sum_D q_i k_j exp(P_i - P_j) where k_index <= q_index (0 after).

    Never exp(P_i) and exp(-P_j) apart: P runs down without bound (g <= 0), so at long lengths exp(-P_j)
    overflows. The queries go a chunk at a time, r the chunk's first query: a key j <= r takes
    q_i exp(P_i - P_r) . k_j exp(P_r - P_j), exact as exp(P_i - P_r) exp(P_r - P_j) = exp(P_i - P_j), and
    bounded as both exponents are <= 0 (i >= r >= j), each factor in (0, 1] and neither smaller than the
    product; the keys r < j <= (the chunk's last query) take exp(P_i - P_j) per pair ([C, C, D]), the
    exponent set to -inf for j > i (those pairs are masked: 0, not an overflow). A decoding step (n = 1) is
    the first part alone, O(m D)."""
    n, m = q.shape[2], k.shape[2]
    q_decays, k_decays = q_decays.to(q.dtype), k_decays.to(q.dtype)
    rows = []
    for a in range(0, n, chunk):
        e = min(a + chunk, n)
        q_c, p_c = q[:, :, a:e], q_decays[:, :, a:e]
        before = int(torch.searchsorted(k_index, q_index[a], right=True))  # keys j <= r
        upto = int(torch.searchsorted(k_index, q_index[e - 1], right=True))  # keys j <= the chunk's last query
        reference = p_c[:, :, :1]
        row = [(q_c * torch.exp(p_c - reference)) @ (k[:, :, :before] * torch.exp(reference - k_decays[:, :, :before])
                                                     ).transpose(-1, -2)]
        if upto > before:
            exponent = p_c[:, :, :, None] - k_decays[:, :, None, before:upto]  # [b, H, C, keys, D]
            later = (k_index[before:upto][None, :] > q_index[a:e][:, None])[..., None]  # j > i
            exponent = exponent.masked_fill(later, float("-inf"))
            row.append((q_c[:, :, :, None] * k[:, :, None, before:upto] * torch.exp(exponent)).sum(-1))
        if m > upto:
            row.append(q.new_zeros(*q_c.shape[:3], m - upto))
        rows.append(torch.cat(row, dim=-1))
    return torch.cat(rows, dim=2)


def attend_written_out(pe, q, k, v, *, allowed, q_positions, k_positions, bias=None, weight=None,
                       token_differences=None, dot_products=None, sink=None, dropout_p: float = 0.0):
    """q [b, H, q, D], k, v [b, H, k, D] (rotated) -> [b, H, q, D] in v's dtype.

    allowed: bool, broadcastable to [b, H, q, k] (None: plain causal attention with no terms, SDPA's fused
    causal kernels); positions [q], [k] (or [b, q], [b, k] per row): what pe.modify_scores and pe.normalise
    read; bias, weight: broadcastable to [b, H, q, k], or None; token_differences: F_i - F_j [b, H, q, k] or
    None; dot_products(q, k) -> [b, H, q, k]: q_i . k_j as the key transforms make them
    (householder.dot_products_for), or None; sink: the layer's sink logits s [H], or None."""
    if token_differences is not None:
        bias = token_differences if bias is None else bias + token_differences
    if allowed is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    rewrites, normalises = "score_rewrite" in pe.channels, "normaliser" in pe.channels
    if weight is None and not rewrites and not normalises and dot_products is None and sink is None:
        mask = allowed if bias is None else bias.to(q.dtype).masked_fill(~allowed, float("-inf"))
        return F.scaled_dot_product_attention(q, k, v, attn_mask=fused_mask(mask), dropout_p=dropout_p)
    # SDPA cannot multiply the scores, so the softmax is written out (in fp32 for low precisions).
    dtype = torch.promote_types(q.dtype, torch.float32)  # float64 stays float64 (the reference tests)
    q, k = q.to(dtype), k.to(dtype)
    scores = (q @ k.transpose(-1, -2) if dot_products is None else dot_products(q, k)) / math.sqrt(q.shape[-1])
    if weight is not None:
        scores = scores * weight
    if rewrites:
        scores = pe.modify_scores(scores, bias, q, k, q_positions, k_positions, allowed)
    elif bias is not None:
        scores = scores + bias
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = pe.normalise(scores, allowed, q_positions, k_positions) if normalises else scores.softmax(dim=-1)
    out = F.dropout(probs, p=dropout_p) @ v.to(dtype)
    if sink is not None:  # the sink's column takes sigmoid(s - lse) of each row's mass: the rest keeps its share
        out = out * torch.sigmoid(scores.logsumexp(dim=-1, keepdim=True) - sink.to(dtype)[:, None, None])
    return out.to(v.dtype)
