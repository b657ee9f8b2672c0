"""`rotary` (RoPE): rotate the first `rotary_pct` of each head's dims of q and k by position-dependent
angles, rotate-half layout ([x1 | x2] -> [x1 cos - x2 sin | x2 cos + x1 sin], not interleaved).
Positions and angles are float32 (an upstream NeoX bug computed them in bf16).

`rotary-scaling` (rope_scaling.py) changes the frequencies for use past the training length; it is a
choice of the run, not of the weights, so a checkpoint trained without it loads with it.
`dynamic_ntk` depends on the number of positions n of the forward (the largest position + 1): a full
forward rotates every token with the frequencies of its n, but the KV cache keeps each key as it was
rotated when it was added (as transformers' cache does). Hence `cache_exact`: False for dynamic_ntk and
longrope, whose cached generation can differ from `recompute` once n passes original-max-position.

`rotary-unrotated-fraction: u` is p-RoPE (Barbero et al. 2024, arXiv 2410.06205, "Round and Round We Go",
p = 1 - u): of the d rotated dims' d/2 frequency pairs, the highest floor(p d/2) keep plain RoPE's
frequencies base^(-2i/d) over the rotated dims d, and the others, the lowest, get frequency 0 (left
unrotated, carrying no position: semantic channels); the paper's rounding, and transformers' `proportional`
rope's. Not `rotary-pct`, which rotates fewer dims but still spans the whole range of frequencies down to
the lowest (its frequencies are computed over the fewer dims)."""
import math
from dataclasses import dataclass
from typing import Optional

import torch

from .rope_scaling import (SEQUENCE_DEPENDENT, STRETCHES_THE_BASE, inverse_frequencies, parse_scaling,
                           plain_inverse_frequencies, scaling_problem)
from .base import PositionalEmbedding, PositionalEmbeddingError, fraction, option, quote
from .registry import register


def unrotated_fraction_problem(value) -> str | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1:
        return (f"must be a number in [0, 1): the fraction of rotary's frequency pairs, lowest first, left "
                f"unrotated (p-RoPE), got {quote(value)}.")
    return None


@register("rotary")
class Rotary(PositionalEmbedding):
    @dataclass
    class Options:
        rotary_pct: float = option(1.0, "Fraction of each head's dimensions that `rotary` rotates.", check=fraction)
        rotary_emb_base: int = option(10000, "Base of the rotary frequencies.", extendable=True)
        rotary_scaling: Optional[dict] = option(
            None, "`rotary` RoPE scaling for lengths past training: {type: linear | ntk | dynamic_ntk | yarn | "
            "llama3 | longrope, factor, original-max-position (default max-position-embeddings), beta-fast, "
            "beta-slow, attention-factor (yarn, longrope), low-freq-factor, high-freq-factor (llama3: 1, 4), "
            "short-factor, long-factor (longrope: one number per rotated frequency pair)}; null is plain rotary.",
            check=scaling_problem, per_run=True, exclusive=True)
        rotary_unrotated_fraction: float = option(
            0.0, "`rotary` p-RoPE (arXiv 2410.06205): the fraction of rotated frequency pairs, the lowest "
            "frequencies, left unrotated (frequency 0); 0 is plain rotary. Not rotary-pct, which keeps the lowest "
            "frequencies.", check=unrotated_fraction_problem, exclusive=True)

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        rotary_pct = self.options.rotary_pct
        self.rotary_dims = int(shape.head_dim * rotary_pct)
        if self.rotary_dims < 2 or self.rotary_dims % 2:
            raise PositionalEmbeddingError(
                f"pos-emb '{self.name}': rotary-pct={rotary_pct} of head dim {shape.head_dim} gives {self.rotary_dims} "
                f"rotated dims; it must be a positive even number. Choose rotary-pct so that it is.")
        self.base = self.options.rotary_emb_base
        self.scaling = self._scaling(self.options.rotary_scaling, shape.max_positions, self.rotary_dims, self.base)
        self.cache_exact = self.scaling is None or self.scaling.type not in SEQUENCE_DEPENDENT
        self.unrotated_pairs = self._unrotated_pairs(self.options.rotary_unrotated_fraction, self.rotary_dims)

    @staticmethod
    def _scaling(value, max_positions, rotary_dims, base):
        if value is None:
            return None
        scaling = parse_scaling(value, max_positions)
        if scaling.type in STRETCHES_THE_BASE and rotary_dims <= 2:
            raise PositionalEmbeddingError(
                f"pos-emb 'rotary': rotary-scaling type {scaling.type} needs at least 4 rotated dims per head: it "
                f"raises the base to factor^(d / (d - 2)), which has no value at d = {rotary_dims}, the dims this "
                "model rotates (head dim x rotary-pct). Raise rotary-pct, or use type linear, yarn or llama3.")
        if scaling.original_max_position is None and scaling.type in ("dynamic_ntk", "yarn", "llama3", "longrope"):
            raise PositionalEmbeddingError(
                f"pos-emb 'rotary': rotary-scaling type {scaling.type} needs original-max-position (the "
                "training length), and max-position-embeddings is not set either. Add it to rotary-scaling.")
        for key in ("short_factor", "long_factor"):
            factors = getattr(scaling, key)
            if factors is not None and len(factors) != rotary_dims // 2:
                raise PositionalEmbeddingError(
                    f"pos-emb 'rotary': rotary-scaling {key.replace('_', '-')} has {len(factors)} numbers, but "
                    f"rotary rotates {rotary_dims} dims of each head (head dim x rotary-pct), {rotary_dims // 2} "
                    f"frequency pairs: give one number per pair.")
            if factors is not None:
                Rotary._check_factors(key, factors, rotary_dims, base)
        return scaling

    # Largest inverse frequency whose angle stays finite in float32 at any position up to 2^31 tokens.
    LARGEST_INV_FREQ = torch.finfo(torch.float32).max / 2 ** 31

    @staticmethod
    def _check_factors(key, factors, rotary_dims, base):
        """longrope's per-pair factors divide inv_freq in float32: one that makes it 0 (underflow, or a factor
        past float32) or inf (a factor that is 0 in float32) turns the rotation into NaN logits at the first
        forward, which then look like the weights' or the dtype's fault. Refused here with the numbers."""
        with torch.device("cpu"):  # the memory check builds the modules on the meta device: these are numbers
            plain = plain_inverse_frequencies(rotary_dims, base)
            scaled = plain / torch.tensor(factors, dtype=torch.float32)
        tiny = torch.finfo(torch.float32).tiny
        bad = [i for i, f in enumerate(scaled.tolist()) if not tiny <= f <= Rotary.LARGEST_INV_FREQ]
        if bad:
            i = bad[0]
            raise PositionalEmbeddingError(
                f"pos-emb 'rotary': rotary-scaling {key.replace('_', '-')}[{i}] = {factors[i]:.6g} divides pair {i}'s "
                f"inverse frequency {plain[i].item():.6g} into {scaled[i].item():.6g} in float32 ("
                f"{len(bad)} pair(s) like it: {bad[:8]}), which {'underflows' if scaled[i].item() < tiny else 'overflows'}"
                f" and makes the rotation NaN. Each factor must keep inv_freq / factor between {tiny:.3g} and "
                f"{Rotary.LARGEST_INV_FREQ:.3g}: for pair {i}, a factor between {plain[i].item() / Rotary.LARGEST_INV_FREQ:.3g}"
                f" and {plain[i].item() / tiny:.3g}.")

    @staticmethod
    def _unrotated_pairs(fraction, rotary_dims) -> int:
        """The pairs p-RoPE leaves unrotated: the paper keeps the p = 1 - u highest frequencies rounded down,
        floor(p d/2) (transformers' `proportional` rope: int(p * head_dim // 2)), so the rest, ceil(u d/2) up
        to float rounding, are unrotated: a fraction that is not a whole number of pairs unrotates one more.
        Rounded to 9 decimals before the floor, so that u = 0.9 of 10 pairs rotates the 1 pair p = 0.1 does
        (in floats (1 - 0.9) * 10 = 0.999...)."""
        pairs = rotary_dims // 2
        rotated = math.floor(round((1 - fraction) * pairs, 9))
        if fraction > 0 and rotated == 0:
            raise PositionalEmbeddingError(
                f"pos-emb 'rotary': rotary-unrotated-fraction {fraction} of {pairs} rotated frequency pairs leaves "
                f"none rotated (floor({1 - fraction:.4g} x {pairs}) = 0), which is no positional encoding at all; "
                f"set at most {1 - 1 / pairs:.4g}, or use `pos-emb: none` for that.")
        return pairs - rotated

    def frequencies(self, seq_len: int | None = None):
        """(inv_freq [rotary_dims/2] float32, attention factor) for a forward over seq_len positions; the
        lowest `unrotated_pairs` frequencies 0 (p-RoPE)."""
        inv_freq, attention_factor = inverse_frequencies(self.scaling, self.rotary_dims, self.base, seq_len)
        if self.unrotated_pairs:
            inv_freq = inv_freq.clone()
            inv_freq[len(inv_freq) - self.unrotated_pairs:] = 0.0
        return inv_freq, attention_factor

    def rotation_tables(self, q_positions, k_positions, dtype=torch.float32):
        """(cos, sin) of the queries and (cos, sin) of the keys, float32 [s, rotary_dims/2] each ([b, s, ...]
        for per-row positions [b, s]): what `rotate` applies, computed once per forward (the attention plan
        keeps them for every layer). yarn's attention factor is in them (transformers scales cos and sin, so
        only the rotated dims). `dtype`: q's and k's, for methods whose tables must fit it (xpos)."""
        seq_len = None
        if self.scaling is not None and self.scaling.type in SEQUENCE_DEPENDENT:  # the only ones that read it
            seq_len = int(max(q_positions.max(), k_positions.max())) + 1
        inv_freq, attention_factor = self.frequencies(seq_len)

        def tables(positions):
            angles = positions.float()[..., None] * inv_freq.to(positions.device)  # [..., s, half]
            cos, sin = angles.cos(), angles.sin()
            if attention_factor != 1.0:
                cos, sin = cos * attention_factor, sin * attention_factor
            return cos, sin
        q_tables = tables(q_positions)
        return q_tables, (q_tables if k_positions is q_positions else tables(k_positions))

    @staticmethod
    def rotate(x, cos, sin):
        """x [b, H, s, D] with its first 2 x cos.shape[-1] dims rotated by the tables (rotate-half layout), in
        float32, returned in x's dtype. The eager form of megatron/model/attention/rotary_kernel.py (CUDA)."""
        half = cos.shape[-1]
        if cos.dim() == 3:  # per-row tables [b, s, half]: one for every head
            cos, sin = cos[:, None], sin[:, None]
        x1, x2 = x[..., :half].float(), x[..., half:2 * half].float()
        rotated = torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(x.dtype)
        if 2 * half == x.shape[-1]:
            return rotated
        return torch.cat([rotated, x[..., 2 * half:]], dim=-1)

    def rotate_qk(self, q, k, q_positions, k_positions):
        (q_cos, q_sin), (k_cos, k_sin) = self.rotation_tables(q_positions, k_positions, q.dtype)
        return self.rotate(q, q_cos, q_sin), self.rotate(k, k_cos, k_sin)
