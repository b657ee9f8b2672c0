"""The `blocked` path on CPU for per-token terms alone (fox's forget gate, score(i, j) += F_i - F_j):
torch's CPU flash kernel per query block, the block's mask made from two O(L) buffers, and the
gradient of F computed on the side, as table_gradient.py does for a bias table. A mask that requires
a gradient would send SDPA to its unfused math kernel (the general `Blocked`, recomputing each block).

Backward, per query block: q/k/v gradients from the flash kernel's own backward (its forward kept the
logsumexp), and the score gradient dS = P * (dO.V^T - rowsum(dO * O)) written out once for the block,
which gives dF_i += sum_j dS_ij (F_i added to row i) and dF_j -= sum_i dS_ij (F_j subtracted from
column j). Memory O(b * H * block * L) per block, never [H, L, L].

Blocks of TOKEN_TERMS_BLOCK queries, not attention-block-size (512 by default): each block reads only
the keys up to its last query, and its [b, H, block, L] tensors stay small. One thread, 8 heads of 32
dims, attention alone, CPU time against `none`'s causal call (a loaded 2-core machine): forward and
backward at b = 4, L = 512 with blocks of 32 / 64 / 128 / 256 / 512 queries 1.4 / 1.4 / 1.3 / 1.3 /
1.3x; forward only at b = 1, L = 2048 with 64 / 128 / 256 / 768: 1.6 / 1.5 / 1.6 / 1.9x. Only the
block's own keys can be in its future, so without a window only that tile is masked."""
import math

import torch

from megatron.model.attention import cpu_flash
from megatron.model.attention.blocked import Blocked
from megatron.model.attention.masks import allowed_keys, token_term_differences
from megatron.model.attention.sink import sink_gradient, with_sink

TOKEN_TERMS_BLOCK = 128  # queries per kernel call (module docstring)


def block_mask(F, positions, start: int, end: int, window, dtype):
    """[b, H, end - start, end]: F_i - F_j for queries start..end-1 and keys 0..end-1, -inf where not visible."""
    mask = token_term_differences(F, slice(start, end), slice(0, end)).to(dtype)  # a new contiguous tensor
    if window is None:  # only the block's own keys can be in its future: -inf above that tile's diagonal
        future = torch.ones(end - start, end - start, dtype=torch.bool, device=F.device).triu(1)
        mask[..., start:end].masked_fill_(future, float("-inf"))
        return mask
    allowed = allowed_keys(positions[start:end], positions[:end], torch.arange(start, end, device=F.device), window)
    return mask.masked_fill_(~allowed, float("-inf"))


class TokenTermsAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, F, positions, window, block, sink=None):
        outputs, logsumexps = [], []
        for start in range(0, q.shape[2], block):
            end = min(start + block, q.shape[2])
            mask = block_mask(F, positions, start, end, window, q.dtype)
            out, lse = cpu_flash.attention(q[:, :, start:end], k[:, :, :end], v[:, :, :end], mask, causal=False)
            outputs.append(out)
            logsumexps.append(lse)
        out, lse = torch.cat(outputs, dim=2), torch.cat(logsumexps, dim=2)
        if sink is not None:  # the sink's (O', lse'), from which the backward runs (sink.py)
            out, lse = with_sink(out, lse, sink)
        ctx.save_for_backward(q, k, v, F, positions, out, lse, sink)
        ctx.window, ctx.block = window, block
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, F, positions, out, lse, sink = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
        dtype = torch.promote_types(q.dtype, torch.float32)
        dF = torch.zeros(F.shape, dtype=dtype, device=F.device) if ctx.needs_input_grad[3] else None
        row_dot = (grad_out.to(dtype) * out.to(dtype)).sum(-1)  # [b, H, L]: rowsum(dO * O)
        scale = 1.0 / math.sqrt(q.shape[-1])
        for start in range(0, q.shape[2], ctx.block):
            end = min(start + ctx.block, q.shape[2])
            mask = block_mask(F, positions, start, end, ctx.window, q.dtype)
            block_q, block_grad = q[:, :, start:end], grad_out[:, :, start:end]
            keys, values = k[:, :, :end], v[:, :, :end]
            dq_block, dk_block, dv_block = cpu_flash.attention_backward(
                block_grad, block_q, keys, values, out[:, :, start:end], lse[:, :, start:end], mask, False)
            dq[:, :, start:end] = dq_block
            dk[:, :, :end] += dk_block
            dv[:, :, :end] += dv_block
            if dF is not None:
                probs = (block_q.to(dtype) * scale) @ keys.to(dtype).transpose(-1, -2)  # scores, then P
                probs.add_(mask).sub_(lse[:, :, start:end, None].to(dtype)).exp_()
                d_scores = block_grad.to(dtype) @ values.to(dtype).transpose(-1, -2)  # dP, then dS
                d_scores.sub_(row_dot[:, :, start:end, None]).mul_(probs)
                dF[:, :, start:end] += d_scores.sum(-1)
                dF[:, :, :end] -= d_scores.sum(-2)
        grad_sink = None if sink is None else sink_gradient(sink, lse, grad_out, out)
        return dq, dk, dv, None if dF is None else dF.to(F.dtype), None, None, None, grad_sink


FOLD_BLOCK = 1024  # queries per call: bounds |F_i - F_middle| (below); the kernel splits calls of >= 768 queries
                   # into tiles of 256, smaller ones into tiles of 64 (1.2-1.4x slower at 512 here)


def folded_token_terms_attention(q, k, v, F, block: int = FOLD_BLOCK, sink=None):
    """Without a window, in float32, without gradients (evaluation, generation): the terms given to the kernel
    as one row of O(L) numbers per head, broadcast over the queries (stride 0), so no [block, L] mask is made.

    Softmax over j is unchanged by a constant per row, so for the queries of a block whose middle is m,
    score(i, j) = q_i.k_j / sqrt(D) + F_i - F_j becomes q_i.k_j / sqrt(D) - (F_j - F_m): the same added row
    for every query of the block. Per block two kernel calls, merged by their logsumexps: the earlier keys,
    all visible, and the block's own keys, a square the kernel masks causally itself. Measuring from F_m
    keeps the added entry small for the keys that carry weight (those near the query): its rounding in the
    kernel's float32 sum is about eps x |F_i - F_m|, at most half a block of forgetting, where one call for
    the whole sequence (F_j alone) loses eps x |F_j|, which grows with L. Not in bf16/fp16, whose 8 or 11
    mantissa bits would lose those differences; the masked blocks subtract in float32 first. Training keeps
    the masked blocks, whose gate gradients are the exact sums.

    Against float64 with strong random gates (F reaches -1211 at L = 700 and -3500 at 2,000; the masked
    blocks' own error, F's float32 running sum, is 6.3e-5 and 2.0e-4): largest error 9.5e-5 at 700 (one
    block) and 1.9e-4 at 2,000. CPU time, one thread, attention alone, b = 1, 4 heads, against `none`'s
    causal call (2026-11-27, a machine loaded by two training runs): 1.10x / 1.10x at L = 8,192 / 16,384
    with head dim 16, 1.07x / 1.03x with head dim 64. Folding the term into one more key dimension instead
    (q' = [q, sqrt(D)], k' = [k, -(F_j - F_m)]) measured 1.44x / 1.21x and 1.15x / 1.17x: the kernel is
    slower at head dim 17 or 65 than at 16 or 64.

    With a sink (its logits [H]), each query's log-sum-exp is the merged calls' plus F_i - F_m (the constant its
    row was shifted by), and the output is rescaled by it (sink.py)."""
    length = q.shape[2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
    out = torch.empty_like(v)
    for start in range(0, length, block):
        end = min(start + block, length)
        middle = (start + end) // 2
        row = (F[..., middle:middle + 1] - F[..., :end]).to(q.dtype)[:, :, None, :]  # [b, H, 1, end]
        queries = q[:, :, start:end]
        own, own_lse = flash(queries, k[:, :, start:end], v[:, :, start:end], 0.0, True,
                             attn_mask=row[..., start:end], scale=scale)
        if start == 0:
            block_out, block_lse = own, own_lse
        else:
            past, past_lse = flash(queries, k[:, :, :start], v[:, :, :start], 0.0, False, attn_mask=row[..., :start],
                                   scale=scale)
            top = torch.maximum(own_lse, past_lse)
            own_weight, past_weight = (own_lse - top).exp()[..., None], (past_lse - top).exp()[..., None]
            block_out = (own * own_weight + past * past_weight) / (own_weight + past_weight)
            block_lse = top + (own_weight + past_weight).squeeze(-1).log()
        if sink is not None:  # the rows' own log-sum-exp: the shift F_i - F_m added back
            shift = (F[..., start:end] - F[..., middle:middle + 1]).to(block_lse.dtype)
            block_out, _ = with_sink(block_out, block_lse + shift, sink)
        out[:, :, start:end] = block_out.to(out.dtype)
    return out


def folds(q, k, v, F, window) -> bool:
    """Whether folded_token_terms_attention computes this forward: no window, float32, no gradient."""
    needs_grad = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v, F))
    return window is None and q.dtype == torch.float32 and not needs_grad


class BlockedTokenTerms(Blocked):
    """Per-token terms alone (no bias, no weight) on CPU: the flash kernel per block (module docstring)."""
    name = "blocked_token_terms"

    # The per-token terms alone, on the CPU flash kernel (no dropout); its block masks are shared by the
    # rows, so it cannot hide each row's documents.
    requires = frozenset({"token_terms", "cpu"})
    handles = frozenset({"cpu", "token_terms", "gradients", "cpu_gradients", "scattered_positions", "window", "sink"})

    @classmethod
    def memory_bytes(cls, inputs):
        """Per block, the mask [b, H, block, L] (fp32 differences, then in the compute dtype) and in the
        backward the written-out scores and their gradient (fp32); the q, k, v gradients and output."""
        run = inputs.run
        block = min(TOKEN_TERMS_BLOCK, run.length)
        per_pair = run.batch * run.heads * (4 + run.element_size + (8 if run.needs_grad else 0))
        return block * run.length * per_pair + 4 * inputs.qkv_bytes

    def attend(self, q, k, v, dropout_p):
        if self.token_terms is None:  # not given this layer's terms (with_layer): plain blocks
            return super().attend(q, k, v, dropout_p)
        if folds(q, k, v, self.token_terms, self.window):
            return folded_token_terms_attention(q, k, v, self.token_terms, sink=self.sink)
        return TokenTermsAttention.apply(q.contiguous(), k.contiguous(), v.contiguous(), self.token_terms,
                                         self.positions, self.window, TOKEN_TERMS_BLOCK, self.sink)
