"""`path` (Yang et al., 2025, "PaTH Attention: Position Encoding via Accumulating Householder
Transformations", arXiv 2505.16381): no rotary and no bias; the key is carried to the query through one
data-dependent Householder-like transform per token in between,
    score(i, j) = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(D),    H_t = I - beta_t w_t w_t^T,
with, per head, w_t = W_w x_t / |W_w x_t| (a unit vector) and beta_t = 2 sigmoid(u . x_t + c) in (0, 2)
(2: negative eigenvalues allowed, as the paper and flash-linear-attention's PaTHAttention), x_t the
layer's attention input (after its input norm). `path-forget-gate: true` adds FoX's forget gate
(PaTH-FoX): sum_{l=j+1..i} log sigmoid(a . x_l + b) added to the scores, as `fox` (b starts at 5, as
`fox-gate-bias-init`'s default).

Differences from fla's layer, on purpose: W_w is one full-rank projection [H D, hidden] (fla: a rank-32
pair of projections followed by a short causal convolution of width 3), so w_t depends on x_t alone and
a KV-cache step needs nothing of the tokens before it but the transformed keys; and the forget gate's
sum is added unscaled, as in FoX (fla's PaTH-FoX multiplies it by 1/sqrt(D) with the dot products).

These are the positional protocol's `key_transforms` channel (base.py): attention computes the dot
products on the strategies that write the scores out (`sdpa_written_out`, `blocked`: a block of queries
carried back over the keys a chunk of 32 at a time, megatron/model/attention/householder.py), and
a KV-cache step applies each new token's H_t to every cached key in place (what fla's decoding does) so
that q_i . (cached key) is the transformed product. Every layer has its own projections: `per_layer`.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError, option
from .registry import register

GATE_BIAS_INIT = 5.0  # f ~ 0.993: little forgetting at first (fox's default)


@register("path")
class PaTH(PositionalEmbedding):
    channels = frozenset({"key_transforms"})
    per_layer = True

    @dataclass
    class Options:
        path_forget_gate: bool = option(False, "`path`: add FoX's forget gate, sum log sigmoid(a.x_l + b) over the "
                                               "tokens between key and query (PaTH-FoX).", exclusive=True,
                                        label="forget-gate")

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        if shape.hidden_size is None:
            raise PositionalEmbeddingError("pos-emb 'path' computes its transforms from the hidden states, so it "
                                           "needs the model's hidden size.")
        heads, dim, hidden = shape.num_heads, shape.head_dim, shape.hidden_size
        self.w_weight = nn.Parameter(torch.randn(heads * dim, hidden) * shape.init_std)
        self.beta_weight = nn.Parameter(torch.randn(heads, hidden) * shape.init_std)
        self.beta_bias = nn.Parameter(torch.zeros(heads))  # beta = 1 at first
        if self.options.path_forget_gate:  # PaTH-FoX: the gate adds per-token terms
            self.channels = self.channels | {"token_terms"}
            self.gate_weight = nn.Parameter(torch.randn(heads, hidden) * shape.init_std)
            self.gate_bias = nn.Parameter(torch.full((heads,), GATE_BIAS_INIT))

    def key_transforms(self, x):
        b, s, _ = x.shape
        x = x.to(torch.promote_types(x.dtype, torch.float32))  # fp32, or float64 in the float64 tests
        w = F.linear(x, self.w_weight.to(x.dtype)).view(b, s, self.num_heads, self.head_dim)
        w = F.normalize(w, dim=-1).transpose(1, 2)                                                  # [b, H, s, D]
        beta = 2 * torch.sigmoid(F.linear(x, self.beta_weight.to(x.dtype), self.beta_bias.to(x.dtype)))  # [b, s, H]
        return w, beta.transpose(1, 2)

    def token_terms(self, x):
        if not self.options.path_forget_gate:
            return None
        x = x.to(torch.promote_types(x.dtype, torch.float32))
        return F.logsigmoid(F.linear(x, self.gate_weight.to(x.dtype), self.gate_bias.to(x.dtype))).transpose(1, 2)

    def kernel_parameters(self):
        """Logged per head: beta where u . x_t = 0 (2 sigmoid(c), 1 at first), and the gate's bias."""
        beta = {"beta_at_zero": 2 * torch.sigmoid(self.beta_bias.float())}
        return {**beta, "gate_bias": self.gate_bias.float()} if self.options.path_forget_gate else beta
