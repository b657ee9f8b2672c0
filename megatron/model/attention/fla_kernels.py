"""The `fla` path: flash-linear-attention's Triton kernels (fla-core 0.6.0) for the three channels fla also
implements, on CUDA only:

- per-token terms alone (pe.token_terms: fox, cable; score(i, j) += g_{j+1} + ... + g_i):
  `fla.ops.forgetting_attn.parallel_forgetting_attn(q, k, v, g)`, g the per-token terms themselves;
- stick-breaking in place of the softmax (a normaliser whose options say how the query's own token shares:
  stickbreaking's `stickbreaking_attend_current`, read here as ATTEND_CURRENT):
  `fla.ops.stickbreaking_attn.parallel_stickbreaking_attn(q, k, v, attend_current=...)`, whose leftover
  stick (`rem`) is dropped as this project's normaliser drops it;
- Householder key transforms (pe.key_transforms: path), with or without per-token terms (PaTH-FoX):
  `fla.ops.path_attn.parallel_path_attn(q, k, v, w, beta, g)`. fla scales its gate with the dot products
  (by 1/sqrt(D)); this project adds the gate's sum unscaled, so fla is given g * sqrt(D).

fla's tensors are [B, L, H, D] (this project's are [b, H, L, D]); packed documents masked (reset-attention-
mask) become one flattened row [1, b L] with `cu_seqlens` at the document boundaries, fla's variable-length
form (it requires batch 1 there). fla's autograd functions return the gradients of g, w and beta, so the
gate and transform parameters learn through this path as through the written-out ones.

What the kernels cannot express is refused in `can_run`, so `auto` takes them only where they compute the
same function: a bias or weight, a score rewrite, dropout, a window, CPU or any device but CUDA, a head
dimension a kernel does not take (PaTH: 16, 32, 64, 128; the others: up to 256), and float32 or float64
compute (Triton's dot products on float32 inputs default to TF32, coarser than this project's float32
path; bf16 and fp16 are what the kernels are for). Measured by tools/gpu_check/fla_kernels.py on an
NVIDIA H200 (torch 2.11.0+cu130, fla-core 0.6.0, 2026-11-27; bf16, [2, 12, 2048, 64], forward and
backward): fox 0.0018 s against 0.0022 s on `sdpa`, stickbreaking 0.0021 s against 0.0121 s on
`sdpa_written_out`, both within about 5e-3 (relative) of this project's float32 path, as its own bf16 is.

fla is imported only when a forward runs here or when `can_run` asks about a CUDA forward: a CPU machine
(whose fla-core may lack triton) never imports it. Where fla is missing on CUDA, `auto` runs this project's
own path and says once why (choice.py, `missing_package`); `attention-impl: fla` refuses in one paragraph.
"""
import functools
import importlib
import importlib.util
import math

import torch

from megatron.model.attention.strategy import AttentionPlan

FLA_PACKAGE = "fla-core==0.6.0"  # requirements-dev.txt pins the same
PATH_HEAD_DIMS = (16, 32, 64, 128)  # fla's parallel_path_attn asserts these
LARGEST_HEAD_DIM = 256  # fla's forgetting and stick-breaking kernels refuse larger
# The option of a method whose normaliser is stick-breaking exactly: whether the query's own token takes a share,
# fla's `attend_current`. A normaliser without it is another, which no fla kernel computes.
ATTEND_CURRENT = "stickbreaking_attend_current"
OPS = {"forgetting_attn": "parallel_forgetting_attn", "stickbreaking_attn": "parallel_stickbreaking_attn",
       "path_attn": "parallel_path_attn"}
# Completes choice.py's "attention-impl is 'fla', but ..." after fla_problem's sentence.
OR_AUTO = "Or set attention-impl to 'auto', which then uses this project's own attention paths"


def kernel(op: str):
    """fla's Triton function for `op` (a key of OPS), imported on first use."""
    return getattr(importlib.import_module(f"fla.ops.{op}"), OPS[op])


@functools.lru_cache(maxsize=None)
def fla_problem() -> str | None:
    """Why fla's kernels cannot be imported on this machine, or None (asked once per process)."""
    for package, missing in (("fla", f"fla-core is not installed here; `pip install {FLA_PACKAGE}` installs it"),
                             ("triton", "triton, which fla's kernels are written in, is not installed here; torch's "
                                        "CUDA wheels bring it (`pip install triton` otherwise)")):
        if importlib.util.find_spec(package) is None:  # finds the package without running its __init__
            return missing
    try:
        for op in OPS:
            kernel(op)
    except Exception as err:  # noqa: BLE001 - any import failure means the same to the user: not usable here
        said = (str(err).splitlines() or ["no message"])[0][:200]  # triton's asserts may say nothing
        return (f"fla-core does not import here ({type(err).__name__}: {said}); "
                f"`pip install {FLA_PACKAGE}` installs the version this project was checked with")
    return None


def cu_seqlens_of(documents: torch.Tensor) -> torch.Tensor:
    """documents [b, s] (each token's document, ids nondecreasing along a row) -> int64 [n + 1]: where each of
    the n documents of the flattened [b s] sequence starts, and b s at the end (fla's `cu_seqlens`)."""
    b, s = documents.shape
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]  # a row's first token always starts one
    first = starts.reshape(-1).nonzero().squeeze(1)
    return torch.cat([first, first.new_tensor([b * s])])


class FlaKernels(AttentionPlan):
    name = path = "fla"
    # The three channels fla computes, with gradients and packed documents (its variable-length form), at
    # any ascending positions (the kernels read the index alone: causality; stick-breaking's own token is
    # the diagonal). Not the CPU, a bias, a weight, a score rewrite, dropout or a window.
    handles = frozenset({"token_terms", "normaliser", "key_transforms", "gradients", "documents",
                         "scattered_positions"})

    def __init__(self, pe, positions, **common):
        super().__init__(pe, positions, **common)
        self.stick_breaking = ({"attend_current": getattr(pe.options, ATTEND_CURRENT)}
                               if "normaliser" in pe.channels and hasattr(pe.options, ATTEND_CURRENT) else None)
        self.cu_seqlens = None if self.documents is None else cu_seqlens_of(self.documents)

    @classmethod
    def can_run(cls, inputs):
        """The needs a kernel cannot express (refusal_without_packages), then whether fla imports here: on
        CUDA only, so a CPU forward never imports it."""
        if (reason := cls.refusal_without_packages(inputs)) is not None:
            return reason
        return None if fla_problem() is None else f"{fla_problem()}. {OR_AUTO}"

    @classmethod
    def missing_package(cls, inputs):
        """fla's problem when it alone keeps the kernels from this forward (`auto` then says so)."""
        return fla_problem() if cls.refusal_without_packages(inputs) is None else None

    @classmethod
    def refusal_without_packages(cls, inputs) -> str | None:
        run = inputs.run
        channels = (inputs.has("token_terms"), inputs.has("normaliser"), inputs.has("key_transforms"))
        if not any(channels):
            return ("the `fla` strategy runs only with per-token terms (fox, cable), stick-breaking (stickbreaking) "
                    "or key transforms (path), the channels fla's Triton kernels compute, and this positional method "
                    "has none of them. Set attention-impl to 'auto'")
        if (reason := super().can_run(inputs)) is not None:
            return reason
        if run.device_type != "cuda":
            return cls.refusal("cpu", inputs)
        stick_breaking = hasattr(inputs.options, ATTEND_CURRENT)
        if inputs.has("normaliser") and (inputs.channels & {"token_terms", "key_transforms"} or not stick_breaking):
            return ("fla's stick-breaking kernel computes stick-breaking alone, and this method's normaliser is "
                    "another, or comes with other terms. Set attention-impl to 'auto'")
        if run.element_size != 2:
            return (f"fla's Triton kernels take bf16 or fp16 (their float32 dot products default to TF32, coarser "
                    f"than this project's float32 path), and this forward computes in {8 * run.element_size}-bit "
                    "floats. Train in bf16 or fp16, or set attention-impl to 'auto'")
        dims = PATH_HEAD_DIMS if inputs.has("key_transforms") else range(1, LARGEST_HEAD_DIM + 1)
        if run.head_dim not in dims:
            allowed = ", ".join(map(str, PATH_HEAD_DIMS)) if inputs.has("key_transforms") else f"up to {LARGEST_HEAD_DIM}"
            return (f"fla's kernel takes head dimensions {allowed}, and this model's is {run.head_dim}. Set "
                    "attention-impl to 'auto'")
        return None

    @classmethod
    def refusal(cls, need, inputs):
        """The reasons complete the sentence "attention-impl is 'fla', but ..." (choice.py): a user reads them."""
        if need == "cpu":
            return (f"fla's Triton kernels need CUDA, and this forward runs on {inputs.run.device_type}. Set "
                    "attention-impl to 'auto' (on CUDA it takes fla's kernels where they apply) or run on a CUDA device")
        what = super().refusal(need, inputs).removeprefix("it does not handle ")
        return f"fla's Triton kernels do not handle {what}. Set attention-impl to 'auto'"

    @classmethod
    def memory_bytes(cls, inputs):
        """The [B, L, H, D] copies of q, k and v and the output, and per query and head fla's saved
        statistics (its logsumexp or leftover stick, the gate's cumulative sum: a few fp32 each); PaTH's
        kernel also keeps its transformed keys and queries (two fp32 copies of q)."""
        run = inputs.run
        per_query = 4 * 4 * run.batch * run.heads * run.length
        transformed = 2 * inputs.qkv_bytes * 4 // run.element_size if inputs.has("key_transforms") else 0
        return 4 * inputs.qkv_bytes + per_query + transformed

    def kept(self, channel, value):
        """Keeps the per-token terms g themselves (fla sums them inside its kernels), not F = cumsum(g)."""
        if channel == "token_terms":
            return value.to(torch.promote_types(value.dtype, torch.float32))
        return super().kept(channel, value)

    def attend(self, q, k, v, dropout_p):
        b, heads, length, dim = q.shape
        wide = torch.promote_types(q.dtype, torch.float32)  # fla takes its gates and transforms in fp32

        def fla_layout(x):  # [b, H, L, ...] -> [B, L, H, ...], or [1, b L, H, ...] for documents
            x = x.movedim(2, 1)
            return (x if self.cu_seqlens is None else x.reshape(1, b * length, *x.shape[2:])).contiguous()

        q_, k_, v_ = fla_layout(q), fla_layout(k), fla_layout(v)
        g = None if self.token_terms is None else fla_layout(self.token_terms.to(wide))
        scale = dim ** -0.5
        if self.key_transforms is not None:
            w, beta = (fla_layout(x.to(wide)) for x in self.key_transforms)
            gate = None if g is None else g * math.sqrt(dim)  # fla scales its gate with the dot products
            out, _ = kernel("path_attn")(q_, k_, v_, w, beta, gate, scale=scale, cu_seqlens=self.cu_seqlens)
        elif self.stick_breaking is not None:
            out, _ = kernel("stickbreaking_attn")(q_, k_, v_, scale=scale, cu_seqlens=self.cu_seqlens,
                                                  **self.stick_breaking)
        else:
            out = kernel("forgetting_attn")(q_, k_, v_, g, scale=scale, cu_seqlens=self.cu_seqlens)
        return out.reshape(b, length, heads, -1).movedim(1, 2).to(v.dtype)
