"""What the `fox` tests (tests/model/positional/test_fox.py, in-process, and tests/e2e/model/positional/test_fox.py,
which compiles) share: x-transformers' Attention with its forget gate beside our `fox` with the gate copied
across, and the paper's attention in float64 with the forget terms written out as explicit sums."""
import math

import torch
from x_transformers.x_transformers import Attention

from megatron.model.positional_embeddings import build_positional_embedding

H, D = 3, 8


def theirs_and_ours(seed=0):
    """x-transformers' causal Attention with its forget gate, and our `fox` with its gate copied."""
    torch.manual_seed(seed)
    attention = Attention(dim=H * D, heads=H, dim_head=D, causal=True, data_dependent_alibi=True)
    gate = attention.data_dependent_alibi.to_forget_gates[0]  # nn.Linear(dim, heads), then LogSigmoid
    with torch.no_grad():
        gate.bias.copy_(torch.randn(H) + 1.0)
    pe = build_positional_embedding("fox", num_heads=H, head_dim=D, hidden_size=H * D)
    with torch.no_grad():
        pe.gate_weight.copy_(gate.weight)
        pe.gate_bias.copy_(gate.bias)
    return attention, gate, pe


def float64_reference(q, k, v, x, w, bias, window=None):
    """The paper's attention in float64, the forget terms as explicit sums over l = j+1..i."""
    q, k, v, x, w, bias = (t.double() for t in (q, k, v, x, w, bias))
    length = q.shape[2]
    log_f = torch.nn.functional.logsigmoid(torch.einsum("bld,hd->bhl", x, w) + bias[None, :, None])  # [b, H, L]
    forget = torch.zeros(q.shape[0], q.shape[1], length, length, dtype=torch.float64)
    for i in range(length):
        for j in range(i):
            forget[:, :, i, j] = log_f[:, :, j + 1:i + 1].sum(dim=-1)
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + forget
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    visible = (j <= i) if window is None else (j <= i) & (i - j < window)
    return logits.masked_fill(~visible, float("-inf")).softmax(dim=-1) @ v
