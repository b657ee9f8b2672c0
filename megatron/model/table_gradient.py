"""Attention with a learnable per-distance bias table whose gradient does not cost SDPA its fused kernel.

SDPA's fused kernels return no gradient for `attn_mask`, so a bias that requires a gradient sends
every call to the unfused math kernel (about 3x causal attention fwd+bwd on CPU at L = 512, issue 12).
Here the bias is a constant to SDPA; the table's gradient is computed separately from the score
gradient dS = P * (dO.V^T - rowsum(dO * O)) summed along diagonals (one distance d = i - j each),
query block by query block, so the extra memory is O(b * H * block * k), never a whole [H, L, L].

q/k/v gradients come from the fused backward: on CPU through aten's flash-attention ops (cpu_flash.py:
the forward keeps its logsumexp, nothing is recomputed); elsewhere by re-running SDPA with the
constant mask under autograd, which keeps CUDA on its fused kernels too.
"""
import math

import torch
import torch.nn.functional as F

from megatron.model import cpu_flash

# Query rows per step of the table gradient. Small blocks waste fewer keys past the diagonal and keep
# the [b, H, block, keys] tensors in cache: one thread, 8 heads of 32 dims, CPU time per call at
# block 16 / 32 / 64 / 128: 26 / 24 / 31 / 49 ms (b = 4, L = 512), 114 / 104 / 106 / 116 ms (b = 1, L = 2048).
GRADIENT_BLOCK = 32
UNDERFLOW = -87.0  # exp(UNDERFLOW) is still a normal float32


def bias_mask(table, q_positions, k_positions, allowed, dtype):
    """[1 | b, H, q, k] contiguous additive mask: table[h, clamp(q_pos - k_pos, 0)], -inf where not
    allowed ([q, k], or [b, 1, q, k] for packed documents)."""
    distance = (q_positions[:, None] - k_positions[None, :]).clamp(min=0)
    mask = table.detach().to(dtype)[:, distance].masked_fill(~allowed, float("-inf"))
    return (mask if mask.dim() == 4 else mask[None]).contiguous()


class TableBiasAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, table, q_positions, k_positions, allowed, mask, causal, reversed_keys):
        # `mask` given: the plan's, shared by every layer (a reference, not a per-call tensor, so it
        # is kept as an attribute, not saved). None: this query block's, rebuilt in backward.
        ctx.mask, ctx.causal, ctx.reversed_keys = mask, causal, reversed_keys
        if mask is None:
            mask = bias_mask(table, q_positions, k_positions, allowed, q.dtype)
        if q.device.type == "cpu":
            out, lse = cpu_flash.attention(q, k, v, mask, causal)
        else:
            out, lse = F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None
        ctx.save_for_backward(q, k, v, out, table, q_positions, k_positions, allowed, lse)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, out, table, q_positions, k_positions, allowed, lse = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        mask = ctx.mask if ctx.mask is not None else bias_mask(table, q_positions, k_positions, allowed, q.dtype)
        if lse is not None:
            dq, dk, dv = cpu_flash.attention_backward(grad_out, q, k, v, out, lse, mask, ctx.causal)
        else:
            with torch.enable_grad():
                inputs = [t.detach().requires_grad_() for t in (q, k, v)]
                again = F.scaled_dot_product_attention(*inputs, attn_mask=mask)
                dq, dk, dv = torch.autograd.grad(again, inputs, grad_out)
        grad_table = None
        if ctx.needs_input_grad[3]:
            grad_table = table_gradient(q, k, v, out, grad_out, mask, q_positions, k_positions, table,
                                        ctx.reversed_keys, lse)
        return dq, dk, dv, grad_table, None, None, None, None, None, None


def table_gradient(q, k, v, out, grad_out, mask, q_positions, k_positions, table, reversed_keys=False,
                   logsumexp=None):
    """d loss / d table [H, span]: the score gradient summed over the batch and along diagonals.

    The queries are the last of the keys (every strategy's call: a square score matrix, or a block of
    queries against the keys up to its last), so a block of rows sees no key past its last row's, and
    those are skipped (their probabilities are 0 and would add nothing): the last keys, or the first
    with `reversed_keys` (the Toeplitz layout: keys in reverse order). `logsumexp` [b, H, q], the forward's (CPU):
    the probabilities are exp(scores - logsumexp), no softmax again. Each block works in place on
    two [b, H, block, keys] tensors: fresh large tensors cost page faults on CPU."""
    dtype = torch.float32 if q.dtype != torch.float64 else q.dtype
    grad = torch.zeros(table.shape, dtype=dtype, device=q.device)
    q_scaled = q.to(dtype) * (1.0 / math.sqrt(q.shape[-1]))
    k_t, v_t = k.to(dtype).transpose(-1, -2), v.to(dtype).transpose(-1, -2)
    row_dot = (grad_out.to(dtype) * out.to(dtype)).sum(-1)  # [b, H, q]: rowsum(dO * O)
    for start in range(0, q.shape[2], GRADIENT_BLOCK):
        end = min(start + GRADIENT_BLOCK, q.shape[2])
        future = q.shape[2] - end  # keys after this block's last query
        keys = slice(future, k.shape[2]) if reversed_keys else slice(0, k.shape[2] - future)
        probs = q_scaled[:, :, start:end] @ k_t[..., keys]  # [b, H, blk, keys]: scores, then probabilities
        probs += mask[:, :, start:end, keys]
        if logsumexp is not None:
            # Clamped first: exp below float32's normal range (about -87.3; masked keys are -inf) takes a slow
            # path on x86, ~10x per element (kerple_power's large distances made the whole step 1.2x `none`).
            # exp(-87) = 1.6e-38 where it was smaller still: nothing a float32 gradient sum can tell apart.
            probs.sub_(logsumexp[:, :, start:end, None]).clamp_(min=UNDERFLOW).exp_()
        else:
            probs = probs.softmax(dim=-1)
        d_scores = grad_out[:, :, start:end].to(dtype) @ v_t[..., keys]  # dP, then dS = P * (dP - rowsum)
        d_scores.sub_(row_dot[:, :, start:end, None]).mul_(probs)
        distance = (q_positions[start:end, None] - k_positions[None, keys]).clamp(min=0)  # [blk, keys]
        grad.index_add_(1, distance.flatten(), d_scores.sum(0).flatten(1))  # 0 where masked
    return grad.to(table.dtype)


def attend_with_table(q, k, v, table, q_positions, k_positions, allowed, mask=None, causal=False,
                      reversed_keys=False):
    """softmax(q.k / sqrt(D) + table[h, d]) . v over the allowed keys, q k v [b, H, q|k, D], table [H, span].

    `mask`: the additive mask these terms make (the `sdpa` path's, built once per forward), else
    built here from the table; `causal`: queries and keys are the same tokens (cpu_flash.py). The queries
    are the last of the keys; `reversed_keys`: the keys come in reverse order (table_gradient)."""
    # Contiguous copies: the CPU flash kernels take strided blocks, but ran them slower than the copies cost
    # (kerple_log training, fwd + bwd, 1.12x `none` strided against 1.07x copied, in one run).
    return TableBiasAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), table, q_positions,
                                    k_positions, allowed, mask, causal, reversed_keys)
