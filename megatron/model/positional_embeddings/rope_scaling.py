"""RoPE scaling for `rotary` past its training length: the `rotary-scaling` option's value and the
inverse frequencies (and attention factor) each type gives. Not a method: rotary.py uses it.

Types, with `factor` s and `original-max-position` L0 (default: max-position-embeddings):
- `linear` (position interpolation): inv_freq / s.
- `ntk` (NTK-aware, static): base -> base * s^(d/(d-2)).
- `dynamic_ntk`: base -> base * (s * n / L0 - (s - 1))^(d/(d-2)) for a forward over n > L0 positions,
  plain rotary for n <= L0. It depends on n, see `Rotary` for what that means for the KV cache.
- `yarn`: per frequency, a ramp between plain (fast, > beta-fast turns over L0) and interpolated (slow,
  < beta-slow turns) frequencies; rotated dims scaled by attention-factor (default 0.1 ln s + 1).
The formulas are transformers' (modeling_rope_utils), which tests/model/positional/test_rope_scaling.py checks against.
"""
import math
from dataclasses import dataclass, fields

import torch

from .base import quote

TYPES = ("linear", "ntk", "dynamic_ntk", "yarn")
KEYS = ("type", "factor", "original_max_position", "beta_fast", "beta_slow", "attention_factor")
EXAMPLE = "rotary-scaling: {type: yarn, factor: 4, original-max-position: 512}"


@dataclass(frozen=True)
class RopeScaling:
    type: str
    factor: float
    original_max_position: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None


def scaling_problem(value) -> str | None:
    """What is wrong with a `rotary-scaling` value (None = plain rotary), or None."""
    if not isinstance(value, dict):
        return f"must be a mapping such as {{{EXAMPLE.split('{', 1)[1]}, got {quote(value)}."
    given = {str(k).replace("-", "_"): v for k, v in value.items()}
    unknown = sorted(set(given) - set(KEYS))
    if unknown:
        return f"unknown key(s) {quote(unknown)}; it accepts {[k.replace('_', '-') for k in KEYS]} (e.g. {EXAMPLE})."
    if given.get("type") not in TYPES:
        return f"type is {quote(given.get('type'))}; choose one of {list(TYPES)} (e.g. {EXAMPLE})."
    factor = given.get("factor")
    if isinstance(factor, bool) or not isinstance(factor, (int, float)) or factor < 1:
        return (f"factor must be a number >= 1 (how many times the training length to reach; 1 is plain "
                f"rotary), got {quote(factor)}.")
    for key in ("original_max_position",):
        if given.get(key) is not None and (not isinstance(given[key], int) or given[key] < 1):
            return (f"{key.replace('_', '-')} must be a positive integer (the training length), got "
                    f"{quote(given[key])}.")
    for key in ("beta_fast", "beta_slow", "attention_factor"):
        if given.get(key) is not None and (not isinstance(given[key], (int, float)) or given[key] <= 0):
            return f"{key.replace('_', '-')} must be a positive number, got {quote(given[key])}."
    return None


def parse_scaling(value: dict, default_original: int | None) -> RopeScaling:
    """The checked `rotary-scaling` mapping as a RopeScaling (`scaling_problem(value)` must be None)."""
    given = {k.replace("-", "_"): v for k, v in value.items() if v is not None}
    given.setdefault("original_max_position", default_original)
    scaling = RopeScaling(**{f.name: given[f.name] for f in fields(RopeScaling) if f.name in given})
    return scaling


def plain_inverse_frequencies(dim: int, base: float) -> torch.Tensor:
    """Plain rotary's inv_freq [dim/2], float32: base^(-2i/dim)."""
    half = dim // 2
    return base ** (-torch.arange(half, dtype=torch.float32) / half)


def inverse_frequencies(scaling: RopeScaling | None, dim: int, base: float, seq_len: int | None = None):
    """(inv_freq [dim/2] float32, attention factor) for `dim` rotated dims; `seq_len` (the number of
    positions in this forward) matters only to dynamic_ntk. `factor: 1` is plain rotary, exactly, for
    every type but dynamic_ntk, which (as in transformers) still stretches the base by n / L0 past L0."""
    if scaling is None or (scaling.factor == 1 and scaling.type != "dynamic_ntk"):
        return plain_inverse_frequencies(dim, base), 1.0
    s, kind, stretch = float(scaling.factor), scaling.type, dim / (dim - 2)
    if kind == "linear":
        return plain_inverse_frequencies(dim, base) / s, 1.0
    if kind == "ntk":
        return plain_inverse_frequencies(dim, base * s ** stretch), 1.0
    if kind == "dynamic_ntk":
        n = max(seq_len or 0, scaling.original_max_position)
        return plain_inverse_frequencies(dim, base * (s * n / scaling.original_max_position - (s - 1)) ** stretch), 1.0
    return _yarn(scaling, dim, base)


def _yarn(scaling: RopeScaling, dim: int, base: float):
    s, original = float(scaling.factor), scaling.original_max_position

    def correction_dim(turns):  # the dimension whose wavelength fits `turns` times into L0
        return dim * math.log(original / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(scaling.beta_fast)), 0)
    high = min(math.ceil(correction_dim(scaling.beta_slow)), dim - 1)
    if low == high:
        high += 0.001  # a one-dimension ramp would divide by zero
    ramp = ((torch.arange(dim // 2, dtype=torch.float32) - low) / (high - low)).clamp(0, 1)  # 1: interpolate
    plain = plain_inverse_frequencies(dim, base)
    inv_freq = plain / s * ramp + plain * (1 - ramp)
    attention = scaling.attention_factor
    if attention is None:
        attention = 1.0 if s <= 1 else 0.1 * math.log(s) + 1.0
    return inv_freq, float(attention)
