"""`fox` (Lin et al., ICLR 2025, "Forgetting Transformer: Softmax Attention with a Forget Gate"): per head h
a scalar forget gate from the layer's attention input x_t (after the input norm),
    f_t = sigmoid(w_h . x_t + b_h),    score(i, j) += sum_{l=j+1..i} log f_l = F_i - F_j,   F = cumsum(log f),
added to the scaled scores; no other positions (the paper's FoX uses none). Its terms are per token, from
the hidden states: `token_terms` returns g = log f [b, H, s] (logsigmoid, exact for large |w.x + b|) and
attention keeps F as two O(L) buffers (no L x L table on the blocked and flex paths; the KV cache keeps
the F of cached positions).

Every layer has its own gate (as in the paper), so the gate lives here and the method sets `per_layer`:
the model builds one `fox` module per layer, each its own w [H, hidden], b [H] (pos-emb-per-layer is
implied). The projection could have lived in the attention layer instead, but then attention would
hold parameters that only one method reads; here the method stays one file and attention only calls
the protocol. b starts at `fox-gate-bias-init` (5: f ~ 0.993, little forgetting at first, as
x-transformers' DataDependentAlibi, which tests/model/positional/test_fox.py checks against; the official FoX
code, github.com/zhixuan-lin/forgetting-transformer, starts the bias at 0: set fox-gate-bias-init: 0 for its
start); w ~ N(0, init-method-std).
"""
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .base import PositionalEmbedding, PositionalEmbeddingError, option
from .registry import register


@register("fox")
class ForgetGate(PositionalEmbedding):
    channels = frozenset({"token_terms"})
    per_layer = True

    @dataclass
    class Options:
        fox_gate_bias_init: float = option(5.0, "`fox`: initial bias b_h of the forget gate f = sigmoid(w.x + b) "
                                                "(5: f ~ 0.993, little forgetting at first, as x-transformers; the "
                                                "official FoX code starts it at 0: f ~ 0.5).", init_only=True,
                                          exclusive=True)

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        if shape.hidden_size is None:
            raise PositionalEmbeddingError("pos-emb 'fox' computes its gate from the hidden states, so it needs "
                                           "the model's hidden size.")
        self.gate_weight = nn.Parameter(torch.randn(shape.num_heads, shape.hidden_size) * shape.init_std)
        self.gate_bias = nn.Parameter(torch.full((shape.num_heads,), float(self.options.fox_gate_bias_init)))

    def token_terms(self, x):
        logits = F.linear(x.float(), self.gate_weight.float(), self.gate_bias.float())  # [b, s, H]
        return F.logsigmoid(logits).transpose(1, 2)                                       # [b, H, s]: log f

    def kernel_parameters(self):
        return {"gate_bias": self.gate_bias.float()}
