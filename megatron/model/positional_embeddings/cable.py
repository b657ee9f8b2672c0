"""`cable` (Veisi and Mansourian 2025, "Context-aware Biases for Length Extrapolation", arXiv 2503.08067):
per head h a learned, data-dependent bias from the layer's attention input x_t (after the input norm),
    b_t = sum_{l<=t} -softplus(w_h . x_l + c_h),    score(i, j) += b_i - b_j = sum_{l=j+1..i} -softplus(...),
a forget gate as `fox` (fox.py), with -softplus(u) = log sigmoid(-u) in place of log sigmoid(u), and the
released code's initialisation: w ~ N(0, init-method-std), c = 0 (so at first every step subtracts
softplus(0) = ln 2 per token: a strong recency bias from the start, where fox's bias 5 forgets little).
Its terms go through the protocol's per-token channel (`token_terms` -> g = -softplus [b, H, s]), so it
runs wherever fox does, with F = cumsum(g) kept as two O(L) buffers, and one gate per layer.

Score scale: the paper's formula is the scaled softmax attention plus the bias, and so is this project's
(q . k / sqrt(D) + b_i - b_j). Its released code (github.com/axiomlab/Cable, src/Cable.py) divides q and k
each by sqrt(C / n_embd) = 1, so its scores are q . k unscaled; `cable-unscaled-scores: true` gives that
form (q multiplied by sqrt(D) in `rotate_qk`, which attention then divides back out).
"""
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError, option
from .registry import register


@register("cable")
class ContextAwareBias(PositionalEmbedding):
    channels = frozenset({"token_terms"})
    per_layer = True

    @dataclass
    class Options:
        cable_unscaled_scores: bool = option(
            False, "`cable`: leave q.k unscaled (no 1/sqrt(head dim)) as CABLE's released code does; false: "
                   "q.k/sqrt(head dim) + b_i - b_j, the paper's formula and every other method's scale here.",
            exclusive=True, label="unscaled")

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        if shape.hidden_size is None:
            raise PositionalEmbeddingError("pos-emb 'cable' computes its biases from the hidden states, so it "
                                           "needs the model's hidden size.")
        self.bias_weight = nn.Parameter(torch.randn(shape.num_heads, shape.hidden_size) * shape.init_std)
        self.bias_offset = nn.Parameter(torch.zeros(shape.num_heads))

    def token_terms(self, x):
        dtype = torch.promote_types(x.dtype, torch.float32)  # its sums grow with L: never below fp32
        logits = F.linear(x.to(dtype), self.bias_weight.to(dtype), self.bias_offset.to(dtype))  # [b, s, H]
        return -F.softplus(logits).transpose(1, 2)                                              # [b, H, s]

    def rotate_qk(self, q, k, q_positions, k_positions):
        if not self.options.cable_unscaled_scores:
            return q, k
        return (q.float() * math.sqrt(self.head_dim)).to(q.dtype), k

    def kernel_parameters(self):
        return {"bias_offset": self.bias_offset.float()}
