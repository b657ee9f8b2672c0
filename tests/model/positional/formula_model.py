"""A model's logits with every layer's attention replaced by a formula written in a test: the model's own
projections, norms and MLPs around it, so a method's whole forward (its tables at 8x the training length,
the strategy `auto` takes there) can be held to a float64 formula that shares none of its attention code."""
import math

import torch

from megatron.model import transformer
from megatron.model.attention.strategy import AttentionPlan


def logits_with_attention(model, ids, attention, monkeypatch):
    """model(ids) with each layer's attention `attention(q, k, v, plan)` -> [b, H, s, D]: q, k, v as the layer
    projects them, not rotated (the formula applies the method itself); `plan` only says which layer's method
    (plan.pe) it is, for a layer pattern."""
    with monkeypatch.context() as patch:
        patch.setattr(AttentionPlan, "rotate", lambda self, q, k: (q, k))
        patch.setattr(transformer, "attend", lambda q, k, v, plan, dropout_p=0.0: attention(q, k, v, plan))
        return model(ids)


def softmax_attention(scores, v):
    """Causal softmax of scores [b, H, s, s] (float64) over keys j <= i, times v."""
    s = scores.shape[-1]
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    return scores.masked_fill(~causal, float("-inf")).softmax(dim=-1) @ v.double()


def dot_products(q, k, head_dim: int):
    """q_i . k_j / sqrt(head_dim) [b, H, s, s] in float64."""
    return q.double() @ k.double().transpose(-1, -2) / math.sqrt(head_dim)
