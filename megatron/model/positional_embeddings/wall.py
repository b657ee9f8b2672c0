"""`wall` (Wall attention, Tilde Research; flash-linear-attention's `fla/ops/wall_attn`): FoX's forget gate
made per channel. Per head h and channel n, a log-gate g_tn = logsigmoid(w_hn . x_t + b_hn) from the layer's
attention input x_t (after its input norm), and with P = cumsum(g) over the tokens,
    score(i, j) = sum_n q_in k_jn exp(P_in - P_jn) / sqrt(D)
              = q_i^T D_i D_{i-1} ... D_{j+1} k_j / sqrt(D),    D_t = diag(exp(g_t)),
so each channel of a key fades by its own gate on its way to the query; no other positions. FoX is the case
of one gate per head (equal over the channels), added to the scores instead of multiplying the channels.

These are the positional protocol's `channel_decays` channel (base.py): `channel_decays` returns g [b, H, s, D]
and attention computes the decayed dot products on the strategies that write the scores out
(`sdpa_written_out`, `blocked`, the cached step; megatron/model/attention/written_out.py says how, without
ever forming exp(P_i) or exp(-P_j), which overflow at long lengths). fla's Wall Triton kernels run on CUDA
only; an `fla` path through them is left for later, and that strategy refuses the channel with its reason.

Every layer has its own gate: `per_layer`, as fox. The gate weight W [H D, hidden] starts at
N(0, init-method-std) and its bias at `wall-gate-bias-init` (5: every channel's gate ~ 0.993, little
forgetting at first, as fox's default). logsigmoid keeps g <= 0, which the written-out block's bounds rely on.
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError, option
from .registry import register


@register("wall")
class Wall(PositionalEmbedding):
    channels = frozenset({"channel_decays"})
    per_layer = True

    @dataclass
    class Options:
        wall_gate_bias_init: float = option(5.0, "`wall`: initial bias of every channel's forget gate "
                                                 "f = sigmoid(w.x + b) (5: f ~ 0.993, little forgetting at first).",
                                            init_only=True, exclusive=True)

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        if shape.hidden_size is None:
            raise PositionalEmbeddingError("pos-emb 'wall' computes its gates from the hidden states, so it needs "
                                           "the model's hidden size.")
        channels = shape.num_heads * shape.head_dim
        self.gate_weight = nn.Parameter(torch.randn(channels, shape.hidden_size) * shape.init_std)
        self.gate_bias = nn.Parameter(torch.full((channels,), float(self.options.wall_gate_bias_init)))

    def channel_decays(self, x):
        b, s, _ = x.shape
        x = x.to(torch.promote_types(x.dtype, torch.float32))  # fp32, or float64 in the float64 tests
        g = F.logsigmoid(F.linear(x, self.gate_weight.to(x.dtype), self.gate_bias.to(x.dtype)))
        return g.view(b, s, self.num_heads, self.head_dim).transpose(1, 2)  # [b, H, s, D]: log f, <= 0

    def kernel_parameters(self):
        """Logged per head: the mean over its channels of the gate's bias."""
        return {"gate_bias": self.gate_bias.float().view(self.num_heads, self.head_dim).mean(-1)}
