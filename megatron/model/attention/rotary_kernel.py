"""Rotary's rotation (rotate-half layout) as one Triton kernel per tensor, forward and backward, for CUDA.

The eager rotation (megatron/model/positional_embeddings/rotary.py's `rotate`) costs about ten kernels per
tensor per layer in a bf16 step: float32 copies of both halves, four multiplies, an add and a subtract, two
`cat`s, a cast back, and as many again in autograd's backward. Here one kernel reads x in its dtype, rotates
the first 2 x half dims in float32 registers by the forward's tables cos, sin [s | b s, half] (computed once
per forward by the positional method: every rotary-scaling type, yarn's attention factor, p-RoPE's zero
frequencies and xpos's decay are in them), copies the unrotated tail (rotary-pct < 1) and writes x's dtype.
The backward is the same kernel with sin negated (a rotation's transpose); the tables take no gradient.

Triton is imported by this module alone, and this module only on CUDA (torch's CUDA wheels bring Triton; a
CPU install may lack it): megatron/model/attention/rotation.py chooses. Tests run it on CPU tensors under
TRITON_INTERPRET=1 in float32/float64 against a float64 reference.
"""
import torch
import triton
import triton.language as tl

BLOCK_S = 16  # positions per program


@triton.jit
def _rotate_kernel(x_ptr, out_ptr, cos_ptr, sin_ptr, H, S, TAIL,
                   x_sb, x_sh, x_ss, o_sb, o_sh, o_ss, t_sb, t_ss,
                   HALF: tl.constexpr, SIGN: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_HALF: tl.constexpr,
                   BLOCK_TAIL: tl.constexpr):
    bh = tl.program_id(0)
    b = bh // H
    h = bh % H
    s = tl.program_id(1) * BLOCK_S + tl.arange(0, BLOCK_S)
    i = tl.arange(0, BLOCK_HALF)
    rows = s < S
    pair = rows[:, None] & (i[None, :] < HALF)
    x_row = x_ptr + b * x_sb + h * x_sh + s[:, None] * x_ss
    o_row = out_ptr + b * o_sb + h * o_sh + s[:, None] * o_ss
    table = b * t_sb + s[:, None] * t_ss + i[None, :]
    cos = tl.load(cos_ptr + table, mask=pair, other=0.0).to(tl.float32)
    sin = tl.load(sin_ptr + table, mask=pair, other=0.0).to(tl.float32) * SIGN
    x1 = tl.load(x_row + i[None, :], mask=pair, other=0.0).to(tl.float32)
    x2 = tl.load(x_row + HALF + i[None, :], mask=pair, other=0.0).to(tl.float32)
    out_type = out_ptr.dtype.element_ty
    tl.store(o_row + i[None, :], (x1 * cos - x2 * sin).to(out_type), mask=pair)
    tl.store(o_row + HALF + i[None, :], (x2 * cos + x1 * sin).to(out_type), mask=pair)
    if BLOCK_TAIL > 0:  # rotary-pct < 1: the dims past the rotated ones, copied
        j = tl.arange(0, BLOCK_TAIL)
        tail = rows[:, None] & (j[None, :] < TAIL)
        tl.store(o_row + 2 * HALF + j[None, :], tl.load(x_row + 2 * HALF + j[None, :], mask=tail), mask=tail)


def _launch(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sign: float) -> torch.Tensor:
    b, heads, s, d = x.shape
    half = cos.shape[-1]
    if x.stride(-1) != 1:
        x = x.contiguous()
    out = torch.empty((b, heads, s, d), dtype=x.dtype, device=x.device)
    cos, sin = cos.contiguous(), sin.contiguous()
    table_batch_stride = cos.stride(0) if cos.dim() == 3 else 0  # per-row tables [b, s, half], or shared [s, half]
    tail = d - 2 * half
    grid = (b * heads, triton.cdiv(s, BLOCK_S))
    _rotate_kernel[grid](x, out, cos, sin, heads, s, tail, *x.stride()[:3], *out.stride()[:3],
                         table_batch_stride, cos.stride(-2), HALF=half, SIGN=sign, BLOCK_S=BLOCK_S,
                         BLOCK_HALF=triton.next_power_of_2(half),
                         BLOCK_TAIL=triton.next_power_of_2(tail) if tail else 0)
    return out


class FusedRotation(torch.autograd.Function):
    """x [b, H, s, D] (last dim contiguous), cos/sin float32 [s, half] or [b, s, half] -> rotated x."""

    @staticmethod
    def forward(ctx, x, cos, sin):
        ctx.save_for_backward(cos, sin)
        return _launch(x, cos, sin, 1.0)

    @staticmethod
    def backward(ctx, grad):
        cos, sin = ctx.saved_tensors
        return _launch(grad, cos, sin, -1.0), None, None


def fused_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return FusedRotation.apply(x, cos, sin)
