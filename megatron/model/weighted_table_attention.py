"""Attention with learnable per-distance bias *and* weight tables (kerple_bias_weight) in training,
without writing out the whole score matrix or keeping it for the backward pass.

    softmax_j( (q_i . k_j / sqrt(D)) * weight[h, i - j] + bias[h, i - j] ) . v_j

No fused kernel multiplies the scores, so the softmax is written out, but a block of queries at a time
against the keys up to its last (the later ones are invisible), reading both terms as strided views of
one row per head (toeplitz.py's row_view: keys in reverse order, nothing gathered). The forward keeps
only q, k, v, the output and the logsumexp [b, H, L]; the backward recomputes each block's scores and
gets dq, dk, dv and both tables' gradients (the score gradient dS summed along diagonals for the bias,
dS * q.k / sqrt(D) for the weight) from one P, as table_gradient.py does for a bias alone. Autograd
through the written-out softmax (`sdpa_written_out`) keeps several [b, H, L, L] tensors and made a
training step 2.4x `none` (issue 27).
"""
import math

import torch

from megatron.model.attention.masks import row_view
from megatron.model.table_gradient import UNDERFLOW, gradient_block

FORWARD_BLOCK = 32  # queries per forward block (one thread, b = 4, 8 heads of 32, L = 512: 15 ms at 32 and 64, 24 at 128)


def weighted_forward(q, k_reversed, v_reversed, bias_row, weight_row):
    """(out [b, H, L, D], logsumexp [b, H, L]) in fp32 or wider, the softmax written out FORWARD_BLOCK
    queries at a time against the keys up to the block's last; q [b, H, L, D], keys and values in reverse
    order, bias_row/weight_row [H, 2L - 1] (toeplitz.py's rows: -inf and 0 where a key is invisible)."""
    dtype = torch.promote_types(q.dtype, torch.float32)
    length = q.shape[2]
    q_scaled = q.to(dtype) * (1.0 / math.sqrt(q.shape[-1]))
    k_c, v_c = (t.to(dtype) for t in (k_reversed, v_reversed))
    out = torch.empty(q.shape, dtype=dtype, device=q.device)
    logsumexp = torch.empty(q.shape[:3], dtype=dtype, device=q.device)
    for start in range(0, length, FORWARD_BLOCK):
        end = min(start + FORWARD_BLOCK, length)
        keys = slice(length - end, length)
        scores = q_scaled[:, :, start:end] @ k_c[:, :, keys].transpose(-1, -2)  # [b, H, blk, keys]
        scores.mul_(row_view(weight_row, start, end, length)).add_(row_view(bias_row, start, end, length))
        # One exp per score in place (torch.logsumexp then exp took two, and made the forward 2x `none`'s),
        # clamped as in table_gradient.py.
        row_max = scores.amax(dim=-1, keepdim=True)
        probs = scores.sub_(row_max).clamp_(min=UNDERFLOW).exp_()  # unnormalised
        total = probs.sum(dim=-1, keepdim=True)
        torch.matmul(probs, v_c[:, :, keys], out=out[:, :, start:end])
        out[:, :, start:end].div_(total)
        logsumexp[:, :, start:end] = (row_max + total.log()).squeeze(-1)
    return out, logsumexp


class WeightedTableAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k_reversed, v_reversed, bias_table, weight_table, bias_row, weight_row, distance_of):
        """weighted_forward's arguments, the tables (for their gradients' shapes; the rows are built from
        them, constants) and distance_of(start, end, keys) -> the [blk, keys] distance index of a block."""
        out, logsumexp = weighted_forward(q, k_reversed, v_reversed, bias_row, weight_row)
        ctx.distance_of = distance_of
        ctx.save_for_backward(q, k_reversed, v_reversed, out, logsumexp, bias_table, weight_table, bias_row,
                              weight_row)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k_reversed, v_reversed, out, logsumexp, bias_table, weight_table, bias_row, weight_row = ctx.saved_tensors
        dtype = out.dtype
        length, scale = q.shape[2], 1.0 / math.sqrt(q.shape[-1])
        q_scaled = q.to(dtype) * scale
        k_c, v_c, grad_out_c = (t.to(dtype) for t in (k_reversed, v_reversed, grad_out))
        row_dot = (grad_out_c * out).sum(-1, keepdim=True)  # [b, H, L, 1]: rowsum(dO * O)
        dq = torch.empty(q.shape, dtype=dtype, device=q.device)
        dk, dv = (torch.zeros(t.shape, dtype=dtype, device=q.device) for t in (k_reversed, v_reversed))
        grad_bias = torch.zeros(bias_table.shape, dtype=dtype, device=q.device)
        grad_weight = torch.zeros(weight_table.shape, dtype=dtype, device=q.device)
        block = gradient_block(q.shape[-1])
        for start in range(0, length, block):
            end = min(start + block, length)
            keys = slice(length - end, length)
            weight = row_view(weight_row, start, end, length)
            raw = q_scaled[:, :, start:end] @ k_c[:, :, keys].transpose(-1, -2)  # q.k / sqrt(D)
            probs = raw * weight
            probs.add_(row_view(bias_row, start, end, length)).sub_(logsumexp[:, :, start:end, None])
            probs.clamp_(min=UNDERFLOW).exp_()
            rows_out = grad_out_c[:, :, start:end]
            dv[:, :, keys] += probs.transpose(-1, -2) @ rows_out
            d_scores = rows_out @ v_c[:, :, keys].transpose(-1, -2)  # dP, then dS = P * (dP - rowsum)
            d_scores.sub_(row_dot[:, :, start:end]).mul_(probs)
            distance = ctx.distance_of(start, end, keys).flatten()
            grad_bias.index_add_(1, distance, d_scores.sum(0).flatten(1))  # 0 where invisible (P = 0)
            grad_weight.index_add_(1, distance, (d_scores * raw).sum(0).flatten(1))
            d_scores.mul_(weight)  # the raw scores' gradient
            torch.matmul(d_scores, k_c[:, :, keys], out=dq[:, :, start:end])
            dk[:, :, keys] += d_scores.transpose(-1, -2) @ q_scaled[:, :, start:end]
        dq.mul_(scale)
        return (dq.to(q.dtype), dk.to(k_reversed.dtype), dv.to(v_reversed.dtype), grad_bias.to(bias_table.dtype),
                grad_weight.to(weight_table.dtype), None, None, None)
