"""RoPE scaling for `rotary` past its training length: the `rotary-scaling` option's value and the
inverse frequencies (and attention factor) each type gives. Not a method: rotary.py uses it.

Types, with `factor` s and `original-max-position` L0 (default: max-position-embeddings):
- `linear` (position interpolation): inv_freq / s.
- `ntk` (NTK-aware, static): base -> base * s^(d/(d-2)).
- `dynamic_ntk`: base -> base * (s * n / L0 - (s - 1))^(d/(d-2)) for a forward over n > L0 positions,
  plain rotary for n <= L0. It depends on n, see `Rotary` for what that means for the KV cache.
- `yarn`: per frequency, a ramp between plain (fast, > beta-fast turns over L0) and interpolated (slow,
  < beta-slow turns) frequencies; rotated dims scaled by attention-factor (default 0.1 ln s + 1).
- `llama3` (Llama 3.1; torchtitan's `scaling: llama`): wavelengths shorter than L0 / high-freq-factor (4)
  kept, longer than L0 / low-freq-factor (1) divided by s, a smooth blend between.
- `longrope` (Phi-3; LongRoPE): per frequency pair i, inv_freq_i / f_i with f = short-factor for a forward
  over n <= L0 positions and long-factor past it (one list of rotated dims / 2 numbers each); rotated dims
  scaled by attention-factor (default sqrt(1 + ln s / ln L0)). Like dynamic_ntk, it depends on n.
The formulas are transformers' (modeling_rope_utils), which tests/model/positional/test_rope_scaling.py checks against.
"""
import math
from dataclasses import dataclass, fields

import torch

from .base import quote

TYPES = ("linear", "ntk", "dynamic_ntk", "yarn", "llama3", "longrope")
KEYS = ("type", "factor", "original_max_position", "beta_fast", "beta_slow", "attention_factor", "low_freq_factor",
        "high_freq_factor", "short_factor", "long_factor")
TYPE_KEYS = {"low_freq_factor": "llama3", "high_freq_factor": "llama3", "short_factor": "longrope",
             "long_factor": "longrope"}  # keys only one type reads
SEQUENCE_DEPENDENT = ("dynamic_ntk", "longrope")  # their frequencies depend on the forward's number of positions
EXAMPLE = "rotary-scaling: {type: yarn, factor: 4, original-max-position: 512}"


@dataclass(frozen=True)
class RopeScaling:
    type: str
    factor: float
    original_max_position: int | None = None
    beta_fast: float = 32.0
    beta_slow: float = 1.0
    attention_factor: float | None = None
    low_freq_factor: float = 1.0      # llama3
    high_freq_factor: float = 4.0     # llama3
    short_factor: tuple | None = None  # longrope: one factor per rotated frequency pair, n <= L0
    long_factor: tuple | None = None   # longrope: the same past L0

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
    for key in ("beta_fast", "beta_slow", "attention_factor", "low_freq_factor", "high_freq_factor"):
        if given.get(key) is not None and (isinstance(given[key], bool) or not isinstance(given[key], (int, float))
                                           or given[key] <= 0):
            return f"{key.replace('_', '-')} must be a positive number, got {quote(given[key])}."
    for key, kind in TYPE_KEYS.items():
        if key in given and given["type"] != kind:
            return f"{key.replace('_', '-')} is read by type {kind} only; remove it or set type: {kind}."
    if given["type"] == "llama3" and given.get("low_freq_factor", 1.0) >= given.get("high_freq_factor", 4.0):
        return (f"low-freq-factor ({given.get('low_freq_factor', 1.0)}) must be below high-freq-factor "
                f"({given.get('high_freq_factor', 4.0)}): wavelengths between L0 / high and L0 / low are blended.")
    if given["type"] == "longrope":
        for key in ("short_factor", "long_factor"):
            factors = given.get(key)
            if not isinstance(factors, list) or not factors or not all(
                    isinstance(f, (int, float)) and not isinstance(f, bool) and f > 0 for f in factors):
                return (f"type longrope needs {key.replace('_', '-')}: a list of positive numbers, one per rotated "
                        f"frequency pair (rotated dims / 2), got {quote(factors)}.")
    return None


def parse_scaling(value: dict, default_original: int | None) -> RopeScaling:
    """The checked `rotary-scaling` mapping as a RopeScaling (`scaling_problem(value)` must be None)."""
    given = {k.replace("-", "_"): v for k, v in value.items() if v is not None}
    given.setdefault("original_max_position", default_original)
    for key in ("short_factor", "long_factor"):
        if key in given:
            given[key] = tuple(float(f) for f in given[key])
    scaling = RopeScaling(**{f.name: given[f.name] for f in fields(RopeScaling) if f.name in given})
    return scaling


def plain_inverse_frequencies(dim: int, base: float) -> torch.Tensor:
    """Plain rotary's inv_freq [dim/2], float32: base^(-2i/dim)."""
    half = dim // 2
    return base ** (-torch.arange(half, dtype=torch.float32) / half)


STRETCHES_THE_BASE = ("ntk", "dynamic_ntk")  # base * s^(d / (d - 2)), d the rotated dims


def inverse_frequencies(scaling: RopeScaling | None, dim: int, base: float, seq_len: int | None = None):
    """(inv_freq [dim/2] float32, attention factor) for `dim` rotated dims; `seq_len` (the number of
    positions in this forward) matters only to dynamic_ntk. `factor: 1` is plain rotary, exactly, for
    every type but dynamic_ntk, which (as in transformers) still stretches the base by n / L0 past L0, and
    longrope, whose per-pair factors apply whatever s is."""
    if scaling is None or (scaling.factor == 1 and scaling.type not in SEQUENCE_DEPENDENT):
        return plain_inverse_frequencies(dim, base), 1.0
    s, kind = float(scaling.factor), scaling.type
    stretch = dim / (dim - 2) if kind in STRETCHES_THE_BASE else None  # d > 2: Rotary._scaling refuses d = 2
    if kind == "linear":
        return plain_inverse_frequencies(dim, base) / s, 1.0
    if kind == "ntk":
        return plain_inverse_frequencies(dim, base * s ** stretch), 1.0
    if kind == "dynamic_ntk":
        n = max(seq_len or 0, scaling.original_max_position)
        return plain_inverse_frequencies(dim, base * (s * n / scaling.original_max_position - (s - 1)) ** stretch), 1.0
    if kind == "llama3":
        return _llama3(scaling, dim, base), 1.0
    if kind == "longrope":
        return _longrope(scaling, dim, base, seq_len)
    return _yarn(scaling, dim, base)


def _llama3(scaling: RopeScaling, dim: int, base: float) -> torch.Tensor:
    s, original = float(scaling.factor), scaling.original_max_position
    plain = plain_inverse_frequencies(dim, base)
    wavelength = 2 * math.pi / plain
    low_band, high_band = original / scaling.low_freq_factor, original / scaling.high_freq_factor  # wavelengths
    scaled = torch.where(wavelength > low_band, plain / s, plain)
    smooth = (original / wavelength - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
    blended = (1 - smooth) * scaled / s + smooth * scaled
    between = (wavelength >= high_band) & (wavelength <= low_band)
    return torch.where(between, blended, scaled)


def _longrope(scaling: RopeScaling, dim: int, base: float, seq_len: int | None):
    s, original = float(scaling.factor), scaling.original_max_position
    long = seq_len is not None and seq_len > original
    factors = torch.tensor(scaling.long_factor if long else scaling.short_factor, dtype=torch.float32)
    inv_freq = plain_inverse_frequencies(dim, base) / factors
    attention = scaling.attention_factor
    if attention is None:
        attention = 1.0 if s <= 1 else math.sqrt(1 + math.log(s) / math.log(original))
    return inv_freq, float(attention)


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
