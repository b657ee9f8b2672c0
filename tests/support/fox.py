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
    # One diagonal (j = i - d) at a time, each sum one term longer than the last: sum_{l=i-d+1..i} log f_l is the
    # previous diagonal's sum plus log f_{i-d+1}. Term by term, never a difference of running totals (the
    # code under test's F_i - F_j); a loop over (i, j) pairs took 15 s at 2,000 tokens.
    running = torch.zeros_like(log_f)  # d = 0: the empty sum, for i = 0..L-1
    for d in range(1, length):
        running = running[..., 1:] + log_f[..., 1:length - d + 1]  # i = d..L-1
        torch.diagonal(forget, offset=-d, dim1=-2, dim2=-1).copy_(running)
    logits = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1]) + forget
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    visible = (j <= i) if window is None else (j <= i) & (i - j < window)
    return logits.masked_fill(~visible, float("-inf")).softmax(dim=-1) @ v
