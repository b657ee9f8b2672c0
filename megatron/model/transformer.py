"""One pre-norm decoder layer: self-attention and an MLP, in sequence or in parallel (GPT-J)."""
import torch
import torch.nn as nn
import torch.nn.functional as F

from megatron.compiled_code import keep_compiled_code_apart
from megatron.model.attention import AttentionPlan, attend
from megatron.model.init_functions import init_normal_
from megatron.model.attention.cached import attend_cached
from megatron.model.model_config import ModelConfig
from megatron.model.norms import build_norm


class OutputGate(nn.Module):
    """Gated attention (Qiu et al. 2025, arXiv 2505.06708; Qwen3-Next): y' = y * sigmoid(x W_g), x the layer's
    input, one gate per head (`head`: W_g is hidden x H) or per channel (`channel`: hidden x hidden), no bias
    (the paper's form). It acts per token, so the KV cache and sequence shards need nothing of it."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        hidden, heads = config.hidden_size, config.num_attention_heads
        self.per_channel = config.attention_output_gate == "channel"
        self.heads, self.head_dim = heads, hidden // heads
        self.gate = nn.Linear(hidden, hidden if self.per_channel else heads, bias=False)
        init_normal_(self.gate.weight, config.init_method, config)

    def forward(self, x, y):
        """x [b, s, hidden] the layer's input, y [b, s, H, D] attention's output -> y gated, same shape."""
        b, s, _ = x.shape
        g = torch.sigmoid(self.gate(x)).view(b, s, self.heads, self.head_dim if self.per_channel else 1)
        return y * g


class SelfAttention(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        hidden = config.hidden_size
        self.num_heads = config.num_attention_heads
        self.head_dim = hidden // self.num_heads
        self.attention_dropout = config.attention.dropout
        self.query_key_value = nn.Linear(hidden, 3 * hidden)
        self.dense = nn.Linear(hidden, hidden)
        init_normal_(self.query_key_value.weight, config.init_method, config)
        init_normal_(self.dense.weight, config.output_layer_init_method, config)
        nn.init.zeros_(self.query_key_value.bias)
        nn.init.zeros_(self.dense.bias)
        self.output_gate = OutputGate(config) if config.attention_output_gate is not None else None
        # attention-sink: one logit per head in every query's softmax, its column dropped (GPT-OSS's `sinks`)
        self.sink = nn.Parameter(torch.zeros(self.num_heads)) if config.attention_sink else None
        if self.sink is not None:
            init_normal_(self.sink, config.init_method, config)

    def forward(self, x, plan: AttentionPlan, kv=None):
        b, s, hidden = x.shape
        qkv = self.query_key_value(x).view(b, s, 3, self.num_heads, self.head_dim)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # each [b, H, s, D]
        plan = plan.with_layer({**plan.pe.layer_values(x), "sink": self.sink})  # this layer's own values, if any
        if kv is not None:  # generation: `plan` is a CachedPlan, kv this layer's cache (kv_cache.py)
            y = attend_cached(q, k, v, plan, kv)
        else:
            q, k = plan.rotate(q, k)
            y = attend(q, k, v, plan, self.attention_dropout if self.training else 0.0)  # [b, H, s, D]
        y = y.transpose(1, 2)  # [b, s, H, D]
        if self.output_gate is not None:
            y = self.output_gate(x, y)
        return self.dense(y.reshape(b, s, hidden))


class MLP(nn.Module):
    def __init__(self, config: ModelConfig):
        super().__init__()
        hidden = config.hidden_size
        width = config.intermediate_size or 4 * hidden
        # swiglu gates the width-wide hidden with a second projection of the same width.
        self.gated = config.activation == "swiglu"
        self.dense_h_to_4h = nn.Linear(hidden, 2 * width if self.gated else width)
        self.dense_4h_to_h = nn.Linear(width, hidden)
        init_normal_(self.dense_h_to_4h.weight, config.init_method, config)
        init_normal_(self.dense_4h_to_h.weight, config.output_layer_init_method, config)
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
    def __init__(self, config: ModelConfig):
        super().__init__()
        self.input_layernorm = build_norm(config)
        self.attention = SelfAttention(config)
        self.post_attention_layernorm = build_norm(config)
        self.mlp = MLP(config)
        self.hidden_dropout = nn.Dropout(config.hidden_dropout)
        self.gpt_j_residual = config.gpt_j_residual

    def forward(self, x, plan: AttentionPlan, kv=None):  # x [b, s, hidden]
        attention_out = self.hidden_dropout(self.attention(self.input_layernorm(x), plan, kv))
        if self.gpt_j_residual:
            # GPT-J: attention and MLP both read the layer input; their outputs add in parallel.
            return x + attention_out + self.hidden_dropout(self.mlp(self.post_attention_layernorm(x)))
        x = x + attention_out
        return x + self.hidden_dropout(self.mlp(self.post_attention_layernorm(x)))


def compile_layers(layers: nn.ModuleList) -> None:
    """Compile each layer in place (torchtitan's per-block torch.compile): its norms, bias-adds, activation,
    residual adds and positional rotation become a few fused kernels. In place (nn.Module.compile), so the
    weights keep their names in checkpoints. Inductor's compiled code is kept per CPU code path
    (megatron/compiled_code.py). Not fullgraph: an attention strategy may leave the graph."""
    keep_compiled_code_apart()
    for layer in layers:
        layer.compile()
