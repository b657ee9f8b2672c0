"""The learnable attention sink (attention-sink) on strategies that keep the softmax's log-sum-exp.

With the sink, each query's softmax has one more logit s_h (per head) whose column is dropped. From plain
attention's output O and log-sum-exp lse of a row, the sink's are lse' = logaddexp(lse, s_h) and
O' = O * exp(lse - lse'): the keys keep their logits, only the normaliser grows. The backward of the sink
attention is the flash backward run from (O', lse') in place of (O, lse): exp(S - lse') are the sink softmax's
probabilities of the keys, and the row term D' = rowsum(dO * O') is the same sum over the keys and the sink's
column (its value is 0). The sink's logit takes the score gradient of its column, p_s (0 - D') with
p_s = exp(s_h - lse'), summed over the batch and the queries. So a strategy whose backward is written from the
forward's (O, lse) carries the sink by saving (O', lse') and returning sink_gradient."""
import torch

from megatron.model.attention import cpu_flash


def with_sink(out, lse, sink):
    """out [b, H, q, D], lse [b, H, q] of plain attention, sink s [H] -> (out', lse') of attention with the sink:
    out' in out's dtype, lse' in lse's (fp32 or wider)."""
    sunk = torch.logaddexp(lse, sink.detach().to(lse.dtype)[:, None])
    return (out.to(lse.dtype) * torch.exp(lse - sunk)[..., None]).to(out.dtype), sunk


def sink_gradient(sink, sunk_lse, grad_out, sunk_out):
    """d loss / d s [H] from the sink attention's lse' [b, H, q], dO and O' [b, H, q, D]: -sum exp(s - lse') D'."""
    dtype = sunk_lse.dtype
    row_dot = (grad_out.to(dtype) * sunk_out.to(dtype)).sum(-1)  # D' = rowsum(dO * O')
    return -(torch.exp(sink.detach().to(dtype)[:, None] - sunk_lse) * row_dot).sum((0, 2)).to(sink.dtype)


class FlashWithSink(torch.autograd.Function):
    """torch's CPU flash kernel (cpu_flash.py) with a sink: its forward's (O, lse) adjusted and its own backward
    run from (O', lse'). q, k, v [b, H, q | k, D], mask [1 | b, 1 | H, q, k] (no gradient), sink [H]."""

    @staticmethod
    def forward(ctx, q, k, v, mask, causal, sink):
        out, lse = with_sink(*cpu_flash.attention(q, k, v, mask, causal), sink)
        ctx.save_for_backward(q, k, v, mask, out, lse, sink)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, mask, out, lse, sink = ctx.saved_tensors
        grad_out = grad_out.contiguous()
        dq, dk, dv = cpu_flash.attention_backward(grad_out, q, k, v, out, lse, mask, ctx.causal)
        return dq, dk, dv, None, None, sink_gradient(sink, lse, grad_out, out)


def flash_with_sink(q, k, v, mask, causal: bool, sink):
    """cpu_flash.attention's output with the sink (FlashWithSink); without one, the kernel's plain output."""
    if sink is None:
        return cpu_flash.attention(q, k, v, mask, causal)[0]
    return FlashWithSink.apply(q, k, v, mask, causal, sink)
