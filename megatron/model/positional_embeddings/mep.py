"""MEP (Gao et al., 2024): the bias is the log of a weighted mean of positional kernels,
b_h(d) = log(sum_k w_k K_k,h(d)), computed as a float32 logsumexp of log-kernels (the public code
takes the log of exponentials that underflow to 0, i.e. an accidental hard window in fp16).
Log-kernels, with ALiBi slopes m_h:
    exponential       -m_h d            gaussian     -m_h d^2
    exponential_half  -(m_h / 2) d      t5           sqrt(D) * T5 table (learned)
    kerple_log        -p_h log(1 + a_h d) (learned, KERPLE-log's constraints and init)
`mep` is the parameter-free mixture (exponential, exponential_half, gaussian; weights 1/3).
`mep_kerple` defaults to the public code's mix (gaussian, exponential, t5, kerple_log; weights 1/4).
Weights are normalised to sum to 1 (any common factor is a per-row constant the softmax ignores).
"""
import math
from dataclasses import dataclass
from typing import Optional

import torch
from torch import nn

from .alibi import alibi_slopes
from .base import ModelShape, OptionError, PositionalEmbedding, option, quote
from .kerple import KerpleEps, KerpleLog
from .registry import register
from .t5 import T5RelativeBias

FIXED_KERNELS = ("exponential", "exponential_half", "gaussian")
LEARNED_KERNELS = ("t5", "kerple_log")


@register("mep_kerple")
class MEPKerple(PositionalEmbedding):
    @dataclass
    class Options(T5RelativeBias.Options, KerpleEps):  # its t5 and kerple_log kernels' options
        mep_kernels: list = option(["gaussian", "exponential", "t5", "kerple_log"],
                                   "`mep_kerple`: kernels averaged (gaussian, exponential, t5, kerple_log).")
        mep_weights: Optional[list] = option(None, "`mep_kerple`: mixture weights; default uniform.")

        def __post_init__(self):
            kernels = list(self.mep_kernels)
            unknown = [k for k in kernels if k not in FIXED_KERNELS + LEARNED_KERNELS]
            if not kernels or unknown or len(set(kernels)) < len(kernels):
                raise OptionError("mep_kernels", f"mep-kernels={quote(kernels)} must be distinct names from "
                                  f"{', '.join(FIXED_KERNELS + LEARNED_KERNELS)}.")
            if "t5" in kernels:
                super().__post_init__()  # the t5 kernel's own check
            weights = self.mep_weights
            numbers = all(isinstance(w, (int, float)) and not isinstance(w, bool) for w in weights or ())
            if weights and (len(weights) != len(kernels) or not numbers or not all(w > 0 for w in weights)):
                raise OptionError("mep_weights", f"mep-weights={quote(list(weights))} must be {len(kernels)} "
                                  f"positive numbers, one per kernel in mep-kernels={quote(kernels)} (or unset for "
                                  "equal weights).")

    def __init__(self, shape: ModelShape, options=None):
        super().__init__(shape, options)
        options = self.options
        kernels = list(options.mep_kernels)
        weights = list(options.mep_weights or [1.0] * len(kernels))
        self.kernels = kernels
        self.log_weights = [math.log(w / sum(weights)) for w in weights]
        self.slopes = alibi_slopes(shape.num_heads)  # floats: immune to model.half()
        kernel_shape = ModelShape(shape.num_heads, shape.head_dim)
        learned = {"t5": lambda: T5RelativeBias(kernel_shape, T5RelativeBias.Options(
                       options.rpe_num_buckets, options.rpe_max_distance)),
                   "kerple_log": lambda: KerpleLog(kernel_shape, KerpleLog.Options(kerple_eps=options.kerple_eps))}
        self.learned = nn.ModuleDict({k: learned[k]() for k in kernels if k in learned})

    def _log_kernel(self, kernel, d, m):
        if kernel == "exponential":
            return -m * d
        if kernel == "exponential_half":
            return -(m / 2) * d
        if kernel == "gaussian":
            return -m * d * d
        return self.learned[kernel].distance_tables(len(d))[0]

    def distance_tables(self, length):
        d = torch.arange(length, device=self.device, dtype=torch.float32)
        m = torch.tensor(self.slopes, device=self.device, dtype=torch.float32)[:, None]
        terms = [w + self._log_kernel(k, d, m) for k, w in zip(self.kernels, self.log_weights)]
        return torch.logsumexp(torch.stack(terms), dim=0), None  # [H, L]

    def kernel_parameters(self):
        return {f"{kernel}.{name}": value for kernel, module in self.learned.items()
                for name, value in module.kernel_parameters().items()}


@register("mep")
class MEP(MEPKerple):
    Options = PositionalEmbedding.Options  # none: the mixture is fixed

    def __init__(self, shape: ModelShape, options=None):
        super().__init__(shape, MEPKerple.Options(mep_kernels=list(FIXED_KERNELS)))
