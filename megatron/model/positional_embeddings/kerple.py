"""KERPLE: learnable shift-invariant CPD kernels added to the attention scores (Chi et al., 2022).

    kerple_log          b_h(d) = -r1 * log(1 + r2 * d)
    kerple_power        b_h(d) = -r1 * d^r2
    kerple_log3         b_h(d) = -r1 * log(1 + r2 * d^r3)           (paper's "3-para-log")
    kerple_bias_weight  score * exp(-r3 * d^r4)  -  r1 * d^r2      (paper's "bias+wht")

Constraints (multipliers >= kerple_eps, exponents in [kerple_eps, 2]) are kept *inside the graph*
by a reparameterisation of raw, unconstrained parameters `raw_<name>`:
    multiplier = eps + softplus(raw)            exponent = eps + (2 - eps) * sigmoid(raw)
The reference instead overwrote `.data` with a clamp in every forward pass, which lets an fp32 master
copy in the optimizer drift out of range; a plain in-graph clamp would zero the gradient (a parameter
pushed below eps would never come back) and a straight-through clamp would let the raw value drift
silently. Softplus/sigmoid keep every effective value in range at every step, with a gradient
everywhere. Cost: near a bound the effective value moves more slowly than the raw one.

Initialisation follows the paper: for log, r1 ~ U(0, 2) and r2 ~ U(0, 1); for power, the exponent
r2 ~ U(0, 2) and the multiplier r1 ~ U(0, 1); other exponents ~ U(0, 2), other multipliers ~ U(0, 1).
`kerple-init: {r1: B1, r2: B2}` changes those upper bounds.
Draws are kept at least eps inside the bounds so the inverse maps stay finite (the reference would
have clamped the rare draw below 0.01 up to 0.01 instead).
Distances and tables are float32 whatever the parameters' dtype (the reference's bf16 distances
rounded every d > 256).
"""
from dataclasses import dataclass
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError, option
from .registry import register


def _multiplier(raw, eps):
    return eps + F.softplus(raw)


def _multiplier_inverse(value, eps):
    x = value - eps
    return x + torch.log(-torch.expm1(-x))  # softplus^-1


def _exponent(raw, eps):
    return eps + (2 - eps) * torch.sigmoid(raw)


def _exponent_inverse(value, eps):
    return torch.logit((value - eps) / (2 - eps))


_CONSTRAINTS = {"multiplier": (_multiplier, _multiplier_inverse), "exponent": (_exponent, _exponent_inverse)}


@dataclass
class KerpleEps:
    """The bound every constrained kernel parameter shares (also `mep_kerple`'s kerple_log kernel's)."""
    kerple_eps: float = option(0.01, "Lower bound of every KERPLE parameter (the reference's clamp).")


class KernelPositionalEmbedding(PositionalEmbedding):
    """Per-head constrained kernel parameters; subclasses give PARAMS and `kernel(d, **params)`."""
    PARAMS: dict[str, tuple[str, float]]  # name -> (constraint, init upper bound of U(0, bound))

    @dataclass
    class Options(KerpleEps):
        kerple_init: Optional[dict] = option(
            None, "KERPLE init: {name: b} draws that parameter ~ U(0, b) (paper: log r1 2, r2 1; power r1 1, "
            "r2 2; exponents 2 and multipliers 1 otherwise).", init_only=True)

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        num_heads, kerple_init = shape.num_heads, self.options.kerple_init
        self.eps = self.options.kerple_eps
        bounds = {name: bound for name, (_, bound) in self.PARAMS.items()}
        unknown = set(kerple_init or {}) - set(bounds)
        if unknown:
            raise PositionalEmbeddingError(
                f"kerple-init names {sorted(unknown)}, which {type(self).__name__} does not have; its "
                f"parameters are {sorted(bounds)} (give each an upper bound b for U(0, b)).")
        bounds.update(kerple_init or {})
        for name, (constraint, _) in self.PARAMS.items():
            init_bound = float(bounds[name])
            upper = 2.0 if constraint == "exponent" else float("inf")
            value = (torch.rand(num_heads, dtype=torch.float64) * init_bound).clamp(2 * self.eps, upper - self.eps)
            raw = _CONSTRAINTS[constraint][1](value, self.eps).float()
            self.register_parameter(f"raw_{name}", nn.Parameter(raw))

    def kernel_parameters(self):
        return {name: _CONSTRAINTS[constraint][0](getattr(self, f"raw_{name}").float(), self.eps)
                for name, (constraint, _) in self.PARAMS.items()}

    def distance_tables(self, length):
        d = torch.arange(length, device=self.device, dtype=torch.float32)
        return self.kernel(d, **{name: value[:, None] for name, value in self.kernel_parameters().items()})

    def kernel(self, d, **params):
        """(bias[H, L] | None, weight[H, L] | None) from distances d [L] and parameters [H, 1]."""
        raise NotImplementedError


@register("kerple_log")
class KerpleLog(KernelPositionalEmbedding):
    PARAMS = {"r1": ("multiplier", 2.0), "r2": ("multiplier", 1.0)}

    def kernel(self, d, r1, r2):
        return -r1 * torch.log1p(r2 * d), None


@register("kerple_power", aliases=("kerple_power_ap_",))
class KerplePower(KernelPositionalEmbedding):
    PARAMS = {"r1": ("multiplier", 1.0), "r2": ("exponent", 2.0)}

    def kernel(self, d, r1, r2):
        return -r1 * d.pow(r2), None


@register("kerple_log3")
class KerpleLog3(KernelPositionalEmbedding):
    PARAMS = {"r1": ("multiplier", 2.0), "r2": ("multiplier", 1.0), "r3": ("exponent", 2.0)}

    def kernel(self, d, r1, r2, r3):
        return -r1 * torch.log1p(r2 * d.pow(r3)), None


@register("kerple_bias_weight")
class KerpleBiasWeight(KernelPositionalEmbedding):
    PARAMS = {"r1": ("multiplier", 1.0), "r2": ("exponent", 2.0),
              "r3": ("multiplier", 1.0), "r4": ("exponent", 2.0)}

    def kernel(self, d, r1, r2, r3, r4):
        return -r1 * d.pow(r2), torch.exp(-r3 * d.pow(r4))
