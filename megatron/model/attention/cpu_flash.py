"""torch's CPU flash-attention kernel, called directly: a mask *and* causality in one call.

SDPA's public function refuses `attn_mask` together with `is_causal`, so a bias method's call has to
send the whole L x L score matrix through the kernel. The kernel itself takes both: told that key j
is invisible to query i < j, it skips every key block after the query block, and a bias method
costs about what causal attention costs. Measured at L = 2048, 8 heads of 32 dims, batch 1, one
thread, on a loaded 2-core machine: causal 157 ms, mask 296 ms, mask + causal 188 ms; forward and
backward 526, 927 and 592 ms.

`causal` is only right where query i and key i are the same token (a square score matrix). The
mask must still hide the future keys with -inf: `causal` only lets the kernel skip work, and the
result is the same bit for bit. The aten op has an autograd formula (q, k and v; never the mask),
so the mask must not require a gradient.

The kernel takes one head size for q, k and v; a method whose `rotate_qk` widens q and k (pope: 2D dims) gives a
narrower v, which goes through with zero columns added and leaves with them dropped (the same numbers: a zero
column of v adds nothing to the output, and its gradient is not returned).
"""
import torch
import torch.nn.functional as F


def as_wide_as(x, q):
    """x [..., Dv] with zero columns up to q's head size (x itself when Dv is that)."""
    return x if x.shape[-1] == q.shape[-1] else F.pad(x, (0, q.shape[-1] - x.shape[-1]))


def attention(q, k, v, mask, causal: bool):
    """q [b, H, q, D], k/v [b, H, k, D], mask [1 | b, 1 | H, q, k] or None -> (out [b, H, q, D], logsumexp)."""
    if mask is not None and mask.dtype != q.dtype:  # the kernel would read the mask's memory as q's dtype
        raise TypeError(f"cpu_flash.attention: mask dtype {mask.dtype} differs from q's {q.dtype}")
    out, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, as_wide_as(v, q), 0.0, causal,
                                                                                attn_mask=mask)[:2]
    return out[..., :v.shape[-1]], logsumexp


def attention_backward(grad_out, q, k, v, out, logsumexp, mask, causal: bool):
    """-> (dq, dk, dv) of `attention`, from its output and logsumexp (nothing is recomputed)."""
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        as_wide_as(grad_out, q), q, k, as_wide_as(v, q), as_wide_as(out, q), logsumexp, 0.0, causal, attn_mask=mask)
    return dq, dk, dv[..., :v.shape[-1]]
