"""Attention with a learnable per-distance bias table whose gradient does not cost SDPA its fused kernel.

SDPA's fused kernels return no gradient for `attn_mask`, so a bias that requires a gradient sends
every call to the unfused math kernel (about 3x causal attention fwd+bwd on CPU at L = 512, issue 12).
Here the bias is a constant to the forward's fused kernel, and the table's gradient is the score
gradient dS = P * (dO.V^T - rowsum(dO * O)) summed along diagonals (one distance d = i - j each),
query block by query block, so the extra memory is O(b * H * block * k), never a whole [H, L, L].

On CPU the forward is aten's flash kernel (cpu_flash.py), which keeps its logsumexp, and the backward
is written here: one pass over query blocks computes P, dS and from them dq, dk, dv *and* the table's
gradient. aten's flash backward computes dS too but does not return it, so calling it and then summing
dS again cost two more matmuls per block and the exp twice (issue 27; one thread, 8 heads of 32 dims,
b = 4, L = 512, CPU time per call: aten's backward with the mask 36 ms + the table gradient 19 ms,
this pass 34-36 ms, against 35 ms for aten's causal backward without a bias; L = 2048, b = 1:
178 ms, this pass 134-141 ms, causal 85 ms). Elsewhere the backward re-runs SDPA with the constant mask
under autograd, which keeps CUDA on its fused kernels, and this pass adds the table's gradient alone.
"""
import math

import torch
import torch.nn.functional as F

from megatron.model.attention import cpu_flash
from megatron.model.attention.sink import sink_gradient, with_sink

UNDERFLOW = -87.0  # exp(UNDERFLOW) is still a normal float32


def gradient_block(head_dim: int) -> int:
    """Query rows per step of the backward pass: small blocks waste fewer keys past the diagonal and keep
    the [b, H, block, keys] tensors in cache, larger ones feed the matmuls better as the head dim grows.
    One thread, CPU time of the pass at block 32 / 48 / 64: 36 / 36 / 41 ms (8 heads of 32 dims, b = 4,
    L = 512), 129 / 112 / 107 ms (12 heads of 64 dims, b = 4, L = 512), 384 / 362 / 356 ms (same, b = 1,
    L = 2048)."""
    return 32 if head_dim <= 32 else 64


def bias_mask(table, q_positions, k_positions, allowed, dtype):
    """[1 | b, H, q, k] contiguous additive mask: table[h, clamp(q_pos - k_pos, 0)], -inf where not
    allowed ([q, k], or [b, 1, q, k] for packed documents)."""
    distance = (q_positions[:, None] - k_positions[None, :]).clamp(min=0)
    mask = table.detach().to(dtype)[:, distance].masked_fill(~allowed, float("-inf"))
    return (mask if mask.dim() == 4 else mask[None]).contiguous()


class TableBiasAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, table, q_positions, k_positions, allowed, mask, causal, reversed_keys, sink):
        # `sink` [H] or None: the learnable sink, on CPU (sink.py: the backward runs from (O', lse')).
        # `mask` given: the plan's, shared by every layer (a reference, not a per-call tensor, so it
        # is kept as an attribute, not saved). None: this query block's, rebuilt in backward.
        ctx.mask, ctx.reversed_keys = mask, reversed_keys
        if mask is None:
            mask = bias_mask(table, q_positions, k_positions, allowed, q.dtype)
        if q.device.type == "cpu":
            out, lse = cpu_flash.attention(q, k, v, mask, causal)
            if sink is not None:
                out, lse = with_sink(out, lse, sink)
        else:  # SDPA returns no log-sum-exp: strategies refuse the sink off the CPU (the `sink_off_cpu` need)
            assert sink is None, "a sink off the CPU reached the table gradient"
            out, lse = F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None
        ctx.save_for_backward(q, k, v, out, table, q_positions, k_positions, allowed, lse, sink)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, table, q_positions, k_positions, allowed, lse, sink = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        mask = ctx.mask if ctx.mask is not None else bias_mask(table, q_positions, k_positions, allowed, q.dtype)
        needs_table = ctx.needs_input_grad[3]
        if lse is not None:
            dq, dk, dv, grad_table, _ = backward_pass(q, k, v, out, grad_out, mask, q_positions, k_positions, table,
                                                      ctx.reversed_keys, lse, qkv=True, table_grad=needs_table)
        else:
            with torch.enable_grad():
                inputs = [t.detach().requires_grad_() for t in (q, k, v)]
                again = F.scaled_dot_product_attention(*inputs, attn_mask=mask)
                dq, dk, dv = torch.autograd.grad(again, inputs, grad_out)
            grad_table = None
            if needs_table:
                grad_table = backward_pass(q, k, v, out, grad_out, mask, q_positions, k_positions, table,
                                           ctx.reversed_keys, None, qkv=False, table_grad=True)[3]
        grad_sink = None if sink is None else sink_gradient(sink, lse, grad_out, out)
        return dq, dk, dv, grad_table, None, None, None, None, None, None, grad_sink


def backward_pass(q, k, v, out, grad_out, mask, q_positions, k_positions, table, reversed_keys, logsumexp, *,
                  qkv: bool, table_grad: bool, weight=None, weight_table=None):
    """(dq, dk, dv, d loss / d table [H, span], d loss / d weight_table), each None where not asked (`qkv`,
    `table_grad`, a `weight`); the table's is the score gradient dS summed over the batch and along
    diagonals. `weight` (like `mask`, [1, H, q, k], a view): scores = (q.k / sqrt(D)) * weight + mask
    (kerple_bias_weight, weighted_table_attention.py), and weight_table's gradient the diagonal sums of
    dS * q.k / sqrt(D).

    The queries are the last of the keys (every strategy's call: a square score matrix, or a block of
    queries against the keys up to its last), so a block of rows sees no key past its last row's, and
    those are skipped (their probabilities are 0 and would add nothing): the last keys, or the first
    with `reversed_keys` (the Toeplitz layout: keys in reverse order). `logsumexp` [b, H, q], the
    forward's (CPU): the probabilities are exp(scores - logsumexp), no softmax again. Each block works in
    place on two [b, H, block, keys] tensors: fresh large tensors cost page faults on CPU."""
    dtype = torch.float32 if q.dtype != torch.float64 else q.dtype
    scale = 1.0 / math.sqrt(q.shape[-1])
    queries, keys_total = q.shape[2], k.shape[2]
    q_c, k_c, v_c, grad_out_c = (t.to(dtype) for t in (q, k, v, grad_out))
    q_scaled = q_c * scale
    k_t, v_t = k_c.transpose(-1, -2), v_c.transpose(-1, -2)
    row_dot = (grad_out_c * out.to(dtype)).sum(-1, keepdim=True)  # [b, H, q, 1]: rowsum(dO * O)
    grad = torch.zeros(table.shape, dtype=dtype, device=q.device) if table_grad else None
    grad_weight = None if weight is None else torch.zeros(weight_table.shape, dtype=dtype, device=q.device)
    if qkv:
        dq = torch.empty(q.shape, dtype=dtype, device=q.device)
        dk, dv = (torch.zeros(t.shape, dtype=dtype, device=q.device) for t in (k, v))
    block = gradient_block(q.shape[-1])
    for start in range(0, queries, block):
        end = min(start + block, queries)
        future = queries - end  # keys after this block's last query
        keys = slice(future, keys_total) if reversed_keys else slice(0, keys_total - future)
        rows_out = grad_out_c[:, :, start:end]
        probs = q_scaled[:, :, start:end] @ k_t[..., keys]  # [b, H, blk, keys]: scores, then probabilities
        if weight is not None:
            raw, block_weight = probs, weight[:, :, start:end, keys]
            probs = raw * block_weight
        probs += mask[:, :, start:end, keys]
        if logsumexp is not None:
            # Clamped first: exp below float32's normal range (about -87.3; masked keys are -inf) takes a slow
            # path on x86, ~10x per element (kerple_power's large distances made the whole step 1.2x `none`).
            # exp(-87) = 1.6e-38 where it was smaller still: nothing a float32 gradient sum can tell apart.
            probs.sub_(logsumexp[:, :, start:end, None]).clamp_(min=UNDERFLOW).exp_()
        else:
            probs = probs.softmax(dim=-1)
        d_scores = rows_out @ v_t[..., keys]  # dP, then dS = P * (dP - rowsum)
        d_scores.sub_(row_dot[:, :, start:end]).mul_(probs)
        if table_grad or weight is not None:
            distance = (q_positions[start:end, None] - k_positions[None, keys]).clamp(min=0).flatten()  # blk * keys
        if table_grad:
            grad.index_add_(1, distance, d_scores.sum(0).flatten(1))  # 0 where masked
        if weight is not None:
            grad_weight.index_add_(1, distance, (d_scores * raw).sum(0).flatten(1))
            d_scores.mul_(block_weight)  # now the gradient of q.k / sqrt(D)
        if qkv:
            dv[:, :, keys] += probs.transpose(-1, -2) @ rows_out
            torch.matmul(d_scores, k_c[:, :, keys], out=dq[:, :, start:end])
            dk[:, :, keys] += d_scores.transpose(-1, -2) @ q_scaled[:, :, start:end]
    grads = (dq.mul_(scale).to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)) if qkv else (None, None, None)
    return (*grads, grad.to(table.dtype) if table_grad else None,
            None if weight is None else grad_weight.to(weight_table.dtype))


def attend_with_table(q, k, v, table, q_positions, k_positions, allowed, mask=None, causal=False,
                      reversed_keys=False, sink=None):
    """softmax(q.k / sqrt(D) + table[h, d]) . v over the allowed keys, q k v [b, H, q|k, D], table [H, span].

    `mask`: the additive mask these terms make (the `sdpa` path's, built once per forward), else
    built here from the table; `causal`: queries and keys are the same tokens (cpu_flash.py). The queries
    are the last of the keys; `reversed_keys`: the keys come in reverse order (table_gradient); `sink`: the
    layer's sink logits [H] (on CPU), or None."""
    # Contiguous copies: the CPU flash kernels take strided blocks, but ran them slower than the copies cost
    # (kerple_log training, fwd + bwd, 1.12x `none` strided against 1.07x copied, in one run).
    return TableBiasAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), table, q_positions,
                                    k_positions, allowed, mask, causal, reversed_keys, sink)
