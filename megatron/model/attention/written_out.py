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
name in WRITTEN_OUT: the strategies that call this block handle what it lists. A layer channel that replaces
step 1's q_i . k_j is one entry of DOT_PRODUCTS: the plans (strategy.py's `dot_products`), the cached step and
the planner's memory estimate read it from there.
"""
import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

from megatron.model.attention.householder import CHUNK, transformed_dot_products
from megatron.model.attention.masks import fused_mask

DECAY_CHUNK = 32  # queries per step of decayed_dot_products: its exact part keeps [b, H, C, C, D]


@dataclass(frozen=True)
class DotProducts:
    """How a layer channel's values make step 1's dot products in place of q_i . k_j."""
    # (q [b, H, n, D], k [b, H, m, D], the values at the queries, the values at the keys, q_first, k_first)
    # -> [b, H, n, m]: the values [b, H, n | m, ...] (or tuples of them) as the plan keeps them (a running-sum
    # channel's sums), at queries q_first.. and keys k_first.. (token indices, each a run of consecutive ones)
    scores: Callable
    # (head_dim, needs_grad) -> numbers in fp32 or wider that computing them keeps per (query, key) pair of every
    # head and sequence: the planner's memory estimate (inputs.py's score_edit_bytes)
    numbers_per_pair: Callable[[int, bool], int]


def at_tokens(value, first: int, end: int):
    """A layer value [b, H, s, ...] (or a tuple of them) at tokens first..end-1."""
    if isinstance(value, tuple):
        return tuple(part[:, :, first:end] for part in value)
    return value[:, :, first:end]


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


def decay_scores(q, k, q_decays, k_decays, q_first: int, k_first: int):
    """decayed_dot_products for queries q_first.. and keys k_first.."""
    return decayed_dot_products(q, k, q_decays, k_decays, torch.arange(q_first, q_first + q.shape[2], device=q.device),
                                torch.arange(k_first, k_first + k.shape[2], device=q.device))


def transformed_scores(q, k, _, transforms, q_first: int, k_first: int):
    """householder.transformed_dot_products with the keys' transforms (w, beta), the keys 0.. (a full forward)."""
    return transformed_dot_products(q, k, *transforms, q_first - k_first)


DOT_PRODUCTS = {
    # householder.py's chunks keep per pair for the backward the carried query once per chunk (D / CHUNK numbers)
    # and about 8 more; without gradients 3. Measured: 42 and 13 bytes a pair (peak RSS rise of one call, 512
    # queries x 4,096 keys, 4 heads of 64 dims, fp32), against 40 and 12 from this count.
    "key_transforms": DotProducts(transformed_scores, lambda head_dim, grad: head_dim // CHUNK + 8 if grad else 3),
    # A count, not measured: per chunk of queries autograd keeps the keys times exp(P_r - P_j) and that factor.
    "channel_decays": DotProducts(decay_scores, lambda head_dim, grad: 2 * head_dim // DECAY_CHUNK + 2 if grad else 1),
}


def dot_product_channel(plan) -> str | None:
    """The DOT_PRODUCTS channel whose layer value `plan` holds (with_layer), or None."""
    held = [channel for channel in DOT_PRODUCTS if getattr(plan, channel, None) is not None]
    if len(held) > 1:
        raise ValueError(f"a layer holds {' and '.join(held)}, each of which replaces q . k: the written-out "
                         "block computes one of them (DOT_PRODUCTS)")
    return held[0] if held else None


# The channels only this block computes; every strategy that calls it handles them (sdpa_written_out, blocked).
WRITTEN_OUT = frozenset({"score_rewrite", "normaliser", "sink", "sink_off_cpu", *DOT_PRODUCTS})


def attend_written_out(pe, q, k, v, *, allowed, q_positions, k_positions, bias=None, weight=None,
                       token_differences=None, dot_products=None, sink=None, dropout_p: float = 0.0):
    """q [b, H, q, D], k, v [b, H, k, D] (rotated) -> [b, H, q, D] in v's dtype.

    allowed: bool, broadcastable to [b, H, q, k] (None: plain causal attention with no terms, SDPA's fused
    causal kernels); positions [q], [k] (or [b, q], [b, k] per row): what pe.modify_scores and pe.normalise
    read; bias, weight: broadcastable to [b, H, q, k], or None; token_differences: F_i - F_j [b, H, q, k] or
    None; dot_products(q, k) -> [b, H, q, k]: q_i . k_j as a layer channel makes them
    (DOT_PRODUCTS, bound by the plan), or None; sink: the layer's sink logits s [H], or None."""
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
