"""Attention with learnable per-distance bias *and* weight tables (kerple_bias_weight) in training,
without writing out the whole score matrix or keeping it for the backward pass.

    softmax_j( (q_i . k_j / sqrt(D)) * weight[h, i - j] + bias[h, i - j] ) . v_j

No fused kernel multiplies the scores, so the softmax is written out, but a block of queries at a time
against the keys up to its last (the later ones are invisible), reading both terms as strided views of
one row per head (masks.py's row_view: keys in reverse order, nothing gathered). The forward keeps
only q, k, v, the output and the logsumexp [b, H, L]; the backward recomputes each block's scores and
gets dq, dk, dv and both tables' gradients (the score gradient dS summed along diagonals for the bias,
dS * q.k / sqrt(D) for the weight) from one P, in table_gradient.py's backward pass. Autograd
through the written-out softmax (`sdpa_written_out`) keeps several [b, H, L, L] tensors and made a
training step 2.4x `none` (issue 27).
"""
import math

import torch

from megatron.model.attention.masks import row_view
from megatron.model.attention.sink import sink_gradient, with_sink
from megatron.model.attention.table_gradient import UNDERFLOW, backward_pass

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
    def forward(ctx, q, k_reversed, v_reversed, bias_table, weight_table, bias_row, weight_row, positions, sink):
        """weighted_forward's arguments, the tables (for their gradients; the rows are built from them,
        constants), the positions of the queries (consecutive; the keys are these in reverse order) and the
        layer's sink logits [H] or None (sink.py: the backward runs from (O', lse'))."""
        out, logsumexp = weighted_forward(q, k_reversed, v_reversed, bias_row, weight_row)
        if sink is not None:
            out, logsumexp = with_sink(out, logsumexp, sink)
        ctx.save_for_backward(q, k_reversed, v_reversed, out, logsumexp, bias_table, weight_table, bias_row,
                              weight_row, positions, sink)
        return out.to(q.dtype)

    @staticmethod
    def backward(ctx, grad_out):
        q, k_reversed, v_reversed, out, logsumexp, bias_table, weight_table, bias_row, weight_row, positions, sink = \
            ctx.saved_tensors
        length = q.shape[2]

        def whole(row):  # [1, H, L, L], keys in reverse order: a view, read block by block
            return row_view(row, 0, length, length)[None]

        dq, dk, dv, grad_bias, grad_weight = backward_pass(
            q, k_reversed, v_reversed, out, grad_out.contiguous(), whole(bias_row), positions, positions.flip(0),
            bias_table, True, logsumexp, qkv=True, table_grad=True, weight=whole(weight_row), weight_table=weight_table)
        grad_sink = None if sink is None else sink_gradient(sink, logsumexp, grad_out, out)
        return dq, dk, dv, grad_bias, grad_weight, None, None, None, grad_sink
