"""`attention-temperature`: a learned temperature on the attention logits, for any method (a wrapper).

    logits_h(i, j) = t_h(i) * ((q_i . k_j / sqrt(D)) * weight + bias)

- `ssmax` (Scalable-Softmax, Nakanishi 2025; the log-n scaling of length extrapolation):
  t_h(i) = s_h * ln(n_i), n_i = the keys query i sees, s_h learned. Attention counts n_i (base.py's
  `query_scale`): the keys up to i in its own packed document, within the attention window, in the KV
  cache; never from i's position, which random-positions draws and running positions carry across
  documents (so the temperature a model trains with is the one it is evaluated with).
  `init` null starts s_h at 1 / ln(max-position-embeddings): the plain softmax at the training length.
- `head_scale` (the per-head learned scale of NoPE length generalisation, Wang et al. 2024): t_h = s_h.
- `llama4` (Llama 4's attention temperature tuning on its layers without positions, iRoPE):
  t(i) = 1 + a * ln(1 + floor(n_i / f)), fixed (nothing learned), a = `scale` (0.1), f = `floor` (8192);
  n_i counted as for ssmax, which is Llama 4's position + 1 in a plain causal sequence. Meant for the `none`
  layers of a `layer-pattern`: it keeps queries sharp past f keys, where a NoPE layer's attention flattens.

The score term is scaled through q (q_i * t_h(i)), so a method without a bias keeps every attention path
and its O(L) memory; a bias is scaled with it: per head for `head_scale` (still a per-distance table),
per query for `ssmax` (then the terms depend on i, and attention builds them pairwise and scales them
with q by `query_scale`).
"""
import math

import torch
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError, quote, softmax_wrapper_problem

TYPES = ("ssmax", "head_scale", "llama4")
KEYS = {"ssmax": {"type", "init"}, "head_scale": {"type", "init"}, "llama4": {"type", "scale", "floor"}}
LLAMA4_DEFAULTS = {"scale": 0.1, "floor": 8192}  # transformers' Llama4TextConfig attn_scale, floor_scale
EXAMPLE = "attention-temperature: {type: ssmax}"


def temperature_problem(value) -> str | None:
    """What is wrong with an `attention-temperature` value (None: off), or None."""
    if value is None:
        return None
    if not isinstance(value, dict):
        return f"must be a mapping such as {{type: ssmax}} or {{type: head_scale, init: 1.0}}, got {quote(value)}."
    given = {str(k).replace("-", "_"): v for k, v in value.items()}
    if given.get("type") not in TYPES:
        return f"type is {quote(given.get('type'))}; choose one of {list(TYPES)} (e.g. {EXAMPLE})."
    unknown = sorted(set(given) - KEYS[given["type"]])
    if unknown:
        return (f"unknown key(s) {quote(unknown)}; type {given['type']} takes "
                f"{' and '.join(sorted(KEYS[given['type']]))} (e.g. {EXAMPLE}).")
    for key in ("scale", "floor"):
        number = given.get(key)
        if number is not None and (isinstance(number, bool) or not isinstance(number, (int, float)) or not number > 0):
            return f"{key} must be a positive number, got {quote(number)}."
    init = given.get("init")
    if init is not None and (isinstance(init, bool) or not isinstance(init, (int, float)) or not init > 0):
        return f"init must be a positive number (the initial s_h), got {quote(init)}."
    return None


class Tempered(PositionalEmbedding):
    """`base` with its attention logits multiplied by a learned temperature (see the module's text)."""

    def __init__(self, base: PositionalEmbedding, temperature: dict):
        super().__init__(base.shape, base.options)
        if "score_rewrite" in base.channels:  # it scales q, which the method's own reading of the scores would see
            raise PositionalEmbeddingError(f"attention-temperature cannot wrap pos-emb {base.name!r}, which rewrites "
                                           "the score matrix itself.")
        given = {str(k).replace("-", "_"): v for k, v in temperature.items()}
        self.base, self.type = base, given["type"]
        self.name, self.max_length = base.name, base.max_length
        self.uses_max_positions, self.cache_exact = base.uses_max_positions, getattr(base, "cache_exact", True)
        init = given.get("init")
        if init is None:
            init = 1.0 / math.log(base.shape.max_positions) if self.type == "ssmax" and base.shape.max_positions \
                and base.shape.max_positions > 1 else 1.0
        if self.type == "llama4":  # fixed: nothing learned, nothing in the checkpoint
            self.temperature_scale = None
            self.llama4_scale = float(given.get("scale", LLAMA4_DEFAULTS["scale"]))
            self.llama4_floor = float(given.get("floor", LLAMA4_DEFAULTS["floor"]))
        else:
            self.temperature_scale = nn.Parameter(torch.full((base.num_heads,), float(init)))
        with torch.no_grad():
            tables = base.distance_tables(1) if "query_terms" not in base.channels else (True, None)
        self.has_bias = tables[0] is not None
        scales_queries = self.type in ("ssmax", "llama4")  # t(i) from the keys i sees: attention counts them
        # A per-query temperature times a bias depends on i, not on i - j alone.
        query_terms = "query_terms" in base.channels or (scales_queries and self.has_bias)
        self.channels = frozenset({"query_scale"} if scales_queries else ()) | ({"query_terms"} if query_terms else set())

    def query_scale(self, keys_seen: torch.Tensor) -> torch.Tensor | None:
        """ssmax: t [b | 1, H, s] = s_h ln(n_i), keys_seen n [b | 1, s] (at least 1: a padding query of an
        export that sees no key gets t = 0, not -inf); llama4: 1 + a ln(1 + floor(n_i / f)), the same for every
        head; head_scale: None (rotate_qk scales q)."""
        if self.type == "llama4":
            n = keys_seen.double().clamp(min=1)  # exact floor(n / f) for any count; the strategy casts t
            t = 1.0 + self.llama4_scale * torch.log1p(torch.floor(n / self.llama4_floor))
            return t[:, None, :].expand(-1, self.num_heads, -1)
        if self.type != "ssmax":
            return None
        return self.temperature_scale.float()[None, :, None] * keys_seen.float().clamp(min=1).log()[:, None, :]

    def add_to_embeddings(self, x, positions):
        return self.base.add_to_embeddings(x, positions)

    def rotate_qk(self, q, k, q_positions, k_positions):
        q, k = self.base.rotate_qk(q, k, q_positions, k_positions)
        if self.type != "head_scale":  # ssmax: attention multiplies q by query_scale
            return q, k
        return (q.float() * self.temperature_scale.float()[None, :, None, None]).to(q.dtype), k

    def rotation_tables(self, q_positions, k_positions, dtype=torch.float32):
        if self.type == "head_scale":  # q scaled per head after the rotation: rotate_qk's own code
            return None
        return self.base.rotation_tables(q_positions, k_positions, dtype)

    def rotate(self, x, cos, sin):
        return self.base.rotate(x, cos, sin)

    def distance_tables(self, length):
        bias, weight = self.base.distance_tables(length)
        if bias is not None and self.type == "head_scale":  # a query scale with a bias is pairwise
            bias = bias * self.temperature_scale.float()[:, None]
        return bias, weight

    def pairwise(self, q_positions, k_positions):
        bias, weight = self.base.pairwise(q_positions, k_positions)
        if bias is not None and self.type == "head_scale":  # ssmax: attention scales it by query_scale
            bias = bias * self.temperature_scale.float()[:, None, None]
        return bias, weight

    def pairwise_bytes(self, needs_grad):
        return self.base.pairwise_bytes(needs_grad) + 4 * self.num_heads

    def kernel_parameters(self):
        if self.temperature_scale is None:  # llama4: nothing learned
            return self.base.kernel_parameters()
        return {**self.base.kernel_parameters(), "temperature_s": self.temperature_scale.float()}


def tempered(base: PositionalEmbedding, temperature: dict | None) -> PositionalEmbedding:
    """`base`, or `base` under `temperature` when one is given."""
    if temperature is not None and "token_terms" in base.channels:
        raise PositionalEmbeddingError(
            f"attention-temperature is set, but pos-emb {base.name!r} adds per-token terms F_i - F_j (a forget "
            "gate) that the temperature would have to scale too, which is not implemented. Remove "
            "attention-temperature for this method.")
    problem = softmax_wrapper_problem(base, "attention-temperature") if temperature is not None else None
    if problem:
        raise PositionalEmbeddingError(problem)
    return base if temperature is None else Tempered(base, temperature)
