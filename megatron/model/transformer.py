"""One pre-norm decoder layer: self-attention and an MLP, in sequence or in parallel (GPT-J)."""
import torch.nn as nn
import torch.nn.functional as F

from megatron.model.attention import AttentionPlan, attend
from megatron.model.attention.config import AttentionConfig
from megatron.model.init_functions import init_normal_
from megatron.model.attention.cached import attend_cached
from megatron.model.norms import build_norm


class SelfAttention(nn.Module):
    def __init__(self, neox_args, attention: AttentionConfig):
        super().__init__()
        hidden = neox_args.hidden_size
        self.num_heads = neox_args.num_attention_heads
        self.head_dim = hidden // self.num_heads
        self.attention_dropout = attention.dropout
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.dense = nn.Linear(hidden, hidden)
        init_normal_(self.query_key_value.weight, neox_args.init_method, neox_args)
        init_normal_(self.dense.weight, neox_args.output_layer_init_method, neox_args)
        nn.init.zeros_(self.query_key_value.bias)
        nn.init.zeros_(self.dense.bias)

    def forward(self, x, plan: AttentionPlan, kv=None):
        b, s, hidden = x.shape
        qkv = self.query_key_value(x).view(b, s, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [b, H, s, D]
        plan = plan.with_token_terms(plan.pe.token_terms(x))  # this layer's per-token terms (fox), if any
        plan = plan.with_key_transforms(plan.pe.key_transforms(x))  # this layer's Householder transforms (path), if any
        if kv is not None:  # generation: `plan` is a CachedPlan, kv this layer's cache (kv_cache.py)
            y = attend_cached(q, k, v, plan, kv)
        else:
            q, k = plan.rotate(q, k)
            y = attend(q, k, v, plan, self.attention_dropout if self.training else 0.0)  # [b, H, s, D]
        return self.dense(y.transpose(1, 2).reshape(b, s, hidden))


class MLP(nn.Module):
    def __init__(self, neox_args):
        super().__init__()
        hidden = neox_args.hidden_size
        width = neox_args.intermediate_size or 4 * hidden
        # swiglu gates the width-wide hidden with a second projection of the same width.
        self.gated = neox_args.activation == "swiglu"
        self.dense_h_to_4h = nn.Linear(hidden, 2 * width if self.gated else width)
        self.dense_4h_to_h = nn.Linear(width, hidden)
        init_normal_(self.dense_h_to_4h.weight, neox_args.init_method, neox_args)
        init_normal_(self.dense_4h_to_h.weight, neox_args.output_layer_init_method, neox_args)
        nn.init.zeros_(self.dense_h_to_4h.bias)
        nn.init.zeros_(self.dense_4h_to_h.bias)

    def forward(self, x):
        h = self.dense_h_to_4h(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            h = F.silu(gate) * up
        else:
            h = F.gelu(h)
        return self.dense_4h_to_h(h)


class TransformerLayer(nn.Module):
    def __init__(self, neox_args, attention: AttentionConfig):
        super().__init__()
        self.input_layernorm = build_norm(neox_args)
        self.attention = SelfAttention(neox_args, attention)
        self.post_attention_layernorm = build_norm(neox_args)
        self.mlp = MLP(neox_args)
        self.hidden_dropout = nn.Dropout(neox_args.hidden_dropout)
        self.gpt_j_residual = neox_args.gpt_j_residual

    def forward(self, x, plan: AttentionPlan, kv=None):  # x [b, s, hidden]
        attention_out = self.hidden_dropout(self.attention(self.input_layernorm(x), plan, kv))
        if self.gpt_j_residual:
            # GPT-J: attention and MLP both read the layer input; their outputs add in parallel.
            return x + attention_out + self.hidden_dropout(self.mlp(self.post_attention_layernorm(x)))
        x = x + attention_out
        return x + self.hidden_dropout(self.mlp(self.post_attention_layernorm(x)))
