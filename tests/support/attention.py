"""What the attention paths' tests (tests/model/attention/, in-process, and tests/e2e/model/attention/, which
compile the flex kernel) share: a positional method with its learnable terms moved off their initial values, at
small sizes, and the float64 reference its paths are checked against (megatron/model/attention/reference.py)."""
import copy

import torch

from megatron.model.attention import reference
from megatron.model.positional_embeddings import build_positional_embedding

HEADS, HEAD_DIM, LENGTH, BLOCK = 4, 8, 40, 16  # 40 = two full blocks and a partial one


def make_pe(name, head_dim=HEAD_DIM):
    torch.manual_seed(0)
    pe = build_positional_embedding(name, num_heads=HEADS, head_dim=head_dim, hidden_size=HEADS * head_dim,
                                    **({"max_position_embeddings": 4 * LENGTH} if name == "learned" else {}))
    # Move every learnable kernel parameter off its initial value so the terms are not special.
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.rand_like(p))
    return pe


def reference_attention(pe, q, k, v, window=None):
    """attention/reference.py in float64: softmax(q.k/sqrt(D) * weight + bias) over keys j <= i with i - j < window."""
    return reference.attention(q.double(), k.double(), v.double(), copy.deepcopy(pe).double(),
                               torch.arange(q.shape[2]), window=window)
