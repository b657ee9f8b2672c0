"""The kernel behind the `flex` attention path: compiled FlexAttention, which on CPU proves itself.

On CUDA the compiled kernel is the point of the path (fused, no L x L tensor). On CPU it is only a
speed path that `auto` never takes, and torch 2.13's compiled CPU kernel has returned wrong numbers
with exit 0 (a kernel reused from another CPU code path's cache; lengths ending in a partial tile:
docs/known-issues.md). So on CPU the first call at each shape (per process) is compared with torch's
eager FlexAttention, its reference math, right on every machine, on the same inputs, one tile of
queries at a time (memory O(H * tile * L)); a mismatch refuses the run with FlexKernelError instead
of returning the kernel's numbers.

`reference_math()` runs the path on the eager kernel instead: the tests check the path's logic
(score_mod, block masks, windows, padding) that way on any CPU.
"""
import contextlib
import os
import typing
import warnings

import torch
from torch.nn.attention.flex_attention import FlexKernelOptions, flex_attention

from megatron.compiled_code import keep_compiled_code_apart
from megatron.errors import NeoXArgsError

# Largest |compiled - eager| accepted, per dtype: both compute in fp32 internally, so a right kernel
# differs by rounding (measured: <= 5e-7 in fp32); the wrong kernels seen differ by 0.1 to 3, or NaN.
TOLERANCE = {torch.float32: 1e-4, torch.float64: 1e-8, torch.bfloat16: 3e-2, torch.float16: 5e-3}
REFERENCE_TILE = 128  # queries per eager call of the check

_compiled = None
_proven_shapes: set = set()
_use_reference = False


class FlexKernelError(NeoXArgsError):
    """torch's compiled CPU FlexAttention gave numbers its own eager reference does not."""


@contextlib.contextmanager
def reference_math():
    """Within: the flex path runs torch's eager FlexAttention (reference math, O(L^2) memory)."""
    global _use_reference
    previous, _use_reference = _use_reference, True
    try:
        yield
    finally:
        _use_reference = previous


def compiled_flex_attention():
    """FlexAttention only avoids the L x L matrix when compiled; compile once per process, into this
    CPU code path's own cache (compiled_code.py)."""
    global _compiled
    if _compiled is None:
        keep_compiled_code_apart()
        _compiled = torch.compile(flex_attention, dynamic=False)
    return _compiled


def eager_flex_attention(q, k, v, score_mod, block_mask):
    """torch's eager FlexAttention, one tile of queries at a time; masked pairs through the score."""
    mask_mod = block_mask.mask_mod
    outputs = []
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*flex_attention called without torch.compile.*")
        for start in range(0, q.shape[2], REFERENCE_TILE):
            tile_scores = _scores_of_tile(score_mod, mask_mod, start)
            outputs.append(flex_attention(q[:, :, start:start + REFERENCE_TILE], k, v, score_mod=tile_scores))
    return torch.cat(outputs, dim=2)


def _scores_of_tile(score_mod, mask_mod, start: int):
    """The score of a tile of queries starting at `start`. The offset is a tensor in a closure, not a
    default argument: torch 2.11's eager FlexAttention reused the first tile's traced score_mod for every
    later tile when the offset was an int default (every query past the first tile then attended wrongly)."""
    offset = torch.tensor(start)

    def tile_scores(score, b, h, q_idx, kv_idx):
        query = q_idx + offset
        return torch.where(mask_mod(b, h, query, kv_idx), score_mod(score, b, h, query, kv_idx), -float("inf"))
    return tile_scores


def kernel_options_problem(value) -> str | None:
    """What is wrong with an `attention-flex-kernel-options` value, or None. The keys and their types are
    torch's own (FlexKernelOptions: block sizes, warps, stages, BACKEND, ...), each optionally prefixed
    with fwd_ or bwd_; block sizes are powers of two."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"must be a mapping such as {{BLOCK_M: 64, BLOCK_N: 64}}, got {value!r}."
    known = typing.get_type_hints(FlexKernelOptions)
    for key, given in value.items():
        name = str(key).removeprefix("fwd_").removeprefix("bwd_")
        if name not in known:
            return (f"{key!r} is not one of torch's FlexAttention kernel options ({', '.join(sorted(known))}, "
                    "each optionally prefixed fwd_ or bwd_).")
        kind = known[name]  # int, bool or a Literal (get_type_hints drops NotRequired)
        if typing.get_origin(kind) is typing.Literal:
            if given not in typing.get_args(kind):
                return f"{key} is {given!r}; torch accepts {list(typing.get_args(kind))}."
        elif kind is bool:
            if not isinstance(given, bool):
                return f"{key} is {given!r}; it must be true or false."
        elif isinstance(given, bool) or not isinstance(given, int) or given < 1 or (
                name.startswith("BLOCK_") and given & (given - 1)):
            return f"{key} is {given!r}; it must be a positive integer" + (
                ", a power of two." if name.startswith("BLOCK_") else ".")
    return None


def run_flex(q, k, v, score_mod, block_mask, kernel=None, kernel_options=None):
    """q, k, v [b, H, s, D] (s whole tiles) -> [b, H, s, D] through `kernel` (default: the compiled one).
    `kernel_options` (attention-flex-kernel-options) go to the CUDA kernel; the compiled CPU kernel has
    none of those knobs (warps, Triton block sizes, backends), so on CPU they are not passed."""
    if _use_reference:
        return eager_flex_attention(q, k, v, score_mod, block_mask)
    kernel = kernel or compiled_flex_attention()
    if q.device.type != "cpu":
        return kernel(q, k, v, score_mod=score_mod, block_mask=block_mask, kernel_options=kernel_options or None)
    out = kernel(q, k, v, score_mod=score_mod, block_mask=block_mask)
    shape = (q.dtype, tuple(q.shape), tuple(k.shape), tuple(v.shape), kernel)
    if shape not in _proven_shapes:
        check_against_reference(out, eager_flex_attention(q, k, v, score_mod, block_mask), q)
        _proven_shapes.add(shape)
    return out


def check_against_reference(out, expected, q):
    """Refuse the compiled kernel's `out` unless it matches the eager `expected` within TOLERANCE."""
    difference = (out.float() - expected.float()).abs()
    largest = difference.max().item() if difference.numel() else 0.0
    tolerance = TOLERANCE.get(q.dtype, 1e-4)
    if largest <= tolerance:  # NaN fails this too
        return
    batch, heads, length, head_dim = q.shape
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    raise FlexKernelError(
        f"attention-impl is 'flex', but torch's compiled CPU FlexAttention kernel gave wrong numbers at "
        f"this shape (batch {batch}, {heads} heads, {length} tokens in whole tiles, head dim {head_dim}, "
        f"{str(q.dtype).removeprefix('torch.')}): its largest difference from torch's own eager "
        f"FlexAttention is {largest:.3g} (allowed {tolerance:g}), so its result was not used. The cause "
        f"seen so far is a torch bug: a kernel compiled for another CPU code path, found in inductor's "
        f"cache {os.environ.get('TORCHINDUCTOR_CACHE_DIR', '(torch default)')} (this run's code path: "
        f"{torch.backends.cpu.get_cpu_capability()}{f', forced by ATEN_CPU_CAPABILITY={forced}' if forced else ''}); "
        "see docs/known-issues.md. Set attention-impl to 'auto' or 'blocked' on CPU (the same numbers, "
        "nothing compiled), or point TORCHINDUCTOR_CACHE_DIR at an empty folder used only by this CPU "
        "code path.")
