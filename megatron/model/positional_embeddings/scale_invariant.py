"""`scale_invariant` (Anson, Wang & Aitchison 2025, "Scale-invariant attention", arXiv 2505.17083): rotary's
rotation (p-RoPE with `rotary-unrotated-fraction`, as the paper pairs it), then each logit transformed by its
distance t = i - j alone,

    logit(i, j) = a_t * (q_i . k_j / sqrt(D)) + m_t,   a_t^2 = 1 + 2 log(1 + t / tau),   m_t = 1 - a_t^2

the paper's closed form a_t = sqrt(2 (log(t/tau + 1) - log alpha + beta/alpha)), m_t = beta/alpha - a_t^2 with
alpha = beta = e^(1/2), the values that leave the nearest keys as they are (a_0 = 1, m_0 = 0). Under
Gaussian logits this keeps the expected attention mass of every range [t, 2t) the same, and its sparsity
bounded, at any length. tau (`scale-invariant-tau`, the paper's best 10) is the only hyperparameter; nothing
is learned. Both terms are the same for every head: a weight and a bias over distances, kerple_bias_weight's
channel, so every strategy that reads a weight table runs it.
"""
from dataclasses import dataclass

import torch

from .base import option
from .registry import register
from .rotary import Rotary
from .xpos import rotary_option


def positive_number(value) -> str | None:
    return None if value > 0 else f"must be a positive number (tokens), got {value}."


@register("scale_invariant")
class ScaleInvariant(Rotary):
    @dataclass
    class Options:
        rotary_pct: float = rotary_option("rotary_pct")  # one key, one declaration (registry.py)
        rotary_emb_base: int = rotary_option("rotary_emb_base")
        rotary_unrotated_fraction: float = rotary_option("rotary_unrotated_fraction")
        scale_invariant_tau: float = option(
            10.0, "`scale_invariant`: tau, the distance (tokens) up to which logits stay nearly as they are; each "
            "logit at distance t becomes a_t * score + 1 - a_t^2 with a_t^2 = 1 + 2 log(1 + t / tau).",
            check=positive_number, exclusive=True, label="tau")
        rotary_scaling = None  # a class attribute, not an option: Rotary reads it, plain frequencies

    def distance_tables(self, length):
        """(bias m_t, weight a_t) [H, length] over t = 0..length-1, float32 (the same row for every head)."""
        growth = 2 * torch.log1p(torch.arange(length, device=self.device, dtype=torch.float64)
                                 / self.options.scale_invariant_tau)  # a_t^2 - 1 = -m_t, in float64
        rows = torch.stack([-growth, (1 + growth).sqrt()]).float()
        return rows[0].expand(self.num_heads, length), rows[1].expand(self.num_heads, length)
