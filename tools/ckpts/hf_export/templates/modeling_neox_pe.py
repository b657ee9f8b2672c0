"""A GPT-NeoX-style decoder exported by tools/ckpts/convert_to_hf.py, with the positional method of
positional_method.py: that method's own file from the project that trained it, copied unchanged, with
the files of its package it imports. Needs torch and transformers only: load it with
`AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)`.

The decoder calls the method only through its protocol (base.py): `add_to_embeddings`, `rotate_qk`,
`pairwise`, `modify_scores`, `normalise` and `layer_values` (its layer channels' values), and attends
with the training project's reference attention (reference.py, copied unchanged), which gives, per head h, query i and visible key j (j <= i,
i - j < the layer's window when set):
    softmax_j( (q_i . k_j / sqrt(D)) * weight[h, i, j] + bias[h, i, j] + F[h, i] - F[h, j] ) . v_j
with F the cumulative sum of the per-token terms `token_terms` computes from the layer's input (fox), or,
for a method that rewrites the score matrix (the `score_rewrite` channel: cope, a `dape` wrapper), the softmax of
what its `modify_scores` makes of the scores (q_i . k_j / sqrt(D)) * weight and the bias.
Positions are counted over the tokens the attention mask keeps (0 for the first real token), so
left-padded batches score exactly like unpadded sequences; rows whose positions differ (padding) call
the method once per row, as the protocol takes one position vector for the batch.
"""

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, PreTrainedModel
from transformers.cache_utils import DynamicCache
from transformers.modeling_outputs import CausalLMOutputWithPast

from .base import ModelShape
from .configuration_neox_pe import NeoXPEConfig
from .dape import daped
from .positional_method import METHODS
from .reference import attend
from .temperature import tempered


def build_positional(config, module):
    """One positional module: {pos_emb, window, options, temperature} of config.positional_modules."""
    if module["pos_emb"] not in METHODS:
        raise ValueError(f"config.json names pos_emb {module['pos_emb']!r}, but positional_method.py holds "
                         f"{sorted(METHODS)}; export the checkpoint again rather than editing config.json.")
    method = METHODS[module["pos_emb"]]
    shape = ModelShape(config.num_attention_heads, config.hidden_size // config.num_attention_heads,
                       config.hidden_size, config.neox_max_position_embeddings, config.initializer_range)
    return daped(tempered(method(shape, method.Options(**module["options"])), module.get("temperature")),
                 module.get("dape"))


def rows_of(positions, same):
    """(row slice, its positions [s]) per distinct row: one for the whole batch when rows agree."""
    return [(slice(None), positions[0])] if same else [(slice(r, r + 1), positions[r]) for r in range(len(positions))]


def score_terms(pe, positions, key_positions, same):
    """(bias, weight) of `pe`, each [b or 1, H, q, k] or None."""
    parts = [pe.pairwise(q, key_positions[rows][0]) for rows, q in rows_of(positions, same)]
    return tuple(None if part[0] is None else torch.stack(part) for part in zip(*parts))


def layer_history(channel, value, running_sum, cache, layer_idx):
    """A layer value of the protocol (base.py's `layer_values`: fox's gate, path's transforms, wall's decays)
    [b, H, s, ...] (or a tuple of such) for every key's token: the new tokens' after the cached ones', as their
    running sum over the tokens (in fp32 or wider) where the scores read one (`reads_running_sum`), run on from
    the cached keys'. The cache keeps them per layer beside their keys (an attribute of this model's own on the
    cache object)."""
    if running_sum:
        value = value.to(torch.promote_types(value.dtype, torch.float32)).cumsum(dim=2)
    if cache is None:
        return value
    kept = getattr(cache, "neox_pe_layer_values", None)
    if kept is None:
        kept = cache.neox_pe_layer_values = {}
    previous = kept.get((layer_idx, channel))
    if previous is not None:
        if running_sum:
            value = value + previous[:, :, -1:]
        value = (tuple(torch.cat(parts, dim=2) for parts in zip(previous, value)) if isinstance(value, tuple)
                 else torch.cat([previous, value], dim=2))
    kept[(layer_idx, channel)] = value
    return value


def build_norm(config):
    norm = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm}[config.norm]
    return norm(config.hidden_size, eps=config.layer_norm_eps)


class SelfAttention(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.head_dim = config.hidden_size // self.num_heads
        self.layer_idx = layer_idx
        self.query_key_value = nn.Linear(config.hidden_size, 3 * config.hidden_size)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        # Gated attention: y * sigmoid(x W_g), one gate per head or per channel (no bias), or none.
        self.gate_kind = getattr(config, "attention_output_gate", None)
        if self.gate_kind is not None:
            self.output_gate = nn.Module()
            self.output_gate.gate = nn.Linear(config.hidden_size, config.hidden_size if self.gate_kind == "channel"
                                              else self.num_heads, bias=False)

        # A learnable attention sink: one logit per head in every query's softmax, its column dropped, or none.
        self.sink = nn.Parameter(torch.zeros(self.num_heads)) if getattr(config, "attention_sink", False) else None

    def forward(self, x, pe, positions, key_positions, same, allowed, terms, cache):
        b, s, hidden = x.shape
        q, k, v = self.query_key_value(x).view(b, s, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        rotated = [pe.rotate_qk(q[rows], k[rows], p, p) for rows, p in rows_of(positions, same)]
        q, k = (torch.cat(part) for part in zip(*rotated))  # keys are cached rotated
        if cache is not None:
            k, v = cache.update(k, v, self.layer_idx)
        bias, weight = terms
        values = {channel: layer_history(channel, value, pe.reads_running_sum(channel), cache, self.layer_idx)
                  for channel, value in pe.layer_values(x).items() if value is not None}  # of every key's token
        # The project's reference attention (reference.py, copied beside this file); a finite mask, not
        # -inf: a padding query that sees no key gets a uniform row instead of NaN.
        y = attend(q, k, v, pe, positions, key_positions, allowed[:, None], bias=bias, weight=weight,
                   finite_mask=True, sink=self.sink, **values)
        y = y.transpose(1, 2)  # [b, s, H, D]
        if self.gate_kind is not None:
            y = y * torch.sigmoid(self.output_gate.gate(x)).view(
                b, s, self.num_heads, self.head_dim if self.gate_kind == "channel" else 1)
        return self.dense(y.reshape(b, s, hidden))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.gated = config.activation == "swiglu"
        width = config.intermediate_size
        self.dense_h_to_4h = nn.Linear(config.hidden_size, 2 * width if self.gated else width)
        self.dense_4h_to_h = nn.Linear(width, config.hidden_size)

    def forward(self, x):
        h = self.dense_h_to_4h(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            return self.dense_4h_to_h(F.silu(gate) * up)
        return self.dense_4h_to_h(F.gelu(h))


class DecoderLayer(nn.Module):
    def __init__(self, config, layer_idx):
        super().__init__()
        self.input_layernorm = build_norm(config)
        self.attention = SelfAttention(config, layer_idx)
        self.post_attention_layernorm = build_norm(config)
        self.mlp = MLP(config)
        self.gpt_j_residual = config.gpt_j_residual

    def forward(self, x, *attention_inputs):
        attention_out = self.attention(self.input_layernorm(x), *attention_inputs)
        if self.gpt_j_residual:
            return x + attention_out + self.mlp(self.post_attention_layernorm(x))
        x = x + attention_out
        return x + self.mlp(self.post_attention_layernorm(x))


class NeoXPEPreTrainedModel(PreTrainedModel):
    config_class = NeoXPEConfig
    base_model_prefix = "model"
    _no_split_modules = ["DecoderLayer"]
    _supports_cache_class = True

    def _init_weights(self, module):
        # Only for weights a checkpoint lacks (none, for an export): plain normal / zeros.
        if isinstance(module, (nn.Linear, nn.Embedding)):
            module.weight.data.normal_(0.0, self.config.initializer_range)
            if getattr(module, "bias", None) is not None:
                module.bias.data.zero_()


class NeoXPEModel(NeoXPEPreTrainedModel):
    def __init__(self, config):
        super().__init__(config)
        self.word_embeddings = nn.Embedding(config.vocab_size, config.hidden_size)
        # One module per kind of layer (one for a plain model), or one per layer; layer i reads layer_module[i].
        self.pos_embs = nn.ModuleList(build_positional(config, module) for module in config.positional_modules)
        self.windows = [module["window"] for module in config.positional_modules]
        self.layer_module = list(config.layer_module)
        self.layers = nn.ModuleList(DecoderLayer(config, i) for i in range(config.num_hidden_layers))
        self.final_layernorm = build_norm(config)
        self.post_init()

    def get_input_embeddings(self):
        return self.word_embeddings

    def set_input_embeddings(self, value):
        self.word_embeddings = value

    def forward(self, input_ids, attention_mask=None, past_key_values=None):
        """-> hidden states [b, s, hidden] after the final norm."""
        b, s = input_ids.shape
        past = past_key_values.get_seq_length() if past_key_values is not None else 0
        total = past + s
        keep = (torch.ones(b, total, dtype=torch.bool, device=input_ids.device) if attention_mask is None
                else attention_mask[:, -total:].bool())
        key_positions = (keep.long().cumsum(dim=-1) - 1).clamp(min=0)  # [b, total]
        positions = key_positions[:, past:]                               # the new tokens' [b, s]
        key_index = torch.arange(total, device=input_ids.device)
        allowed = (key_index[None, None, :] <= (past + torch.arange(s, device=input_ids.device))[None, :, None])
        allowed = allowed & keep[:, None, :]
        distance = positions[:, :, None] - key_positions[:, None, :]
        allowed = [allowed if window is None else allowed & (distance < window) for window in self.windows]
        same = bool((key_positions == key_positions[:1]).all())
        x = self.word_embeddings(input_ids)
        x = torch.cat([self.pos_embs[0].add_to_embeddings(x[rows], p) for rows, p in rows_of(positions, same)])
        terms = [score_terms(pe, positions, key_positions, same) for pe in self.pos_embs]  # once per forward
        for i, layer in enumerate(self.layers):
            j = self.layer_module[i]
            x = layer(x, self.pos_embs[j], positions, key_positions, same, allowed[j], terms[j], past_key_values)
        return self.final_layernorm(x)


class NeoXPEForCausalLM(NeoXPEPreTrainedModel, GenerationMixin):
    def __init__(self, config):
        super().__init__(config)
        self.model = NeoXPEModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False) if config.no_weight_tying else None
        self.post_init()

    def get_input_embeddings(self):
        return self.model.word_embeddings

    def get_output_embeddings(self):
        return self.lm_head

    def forward(self, input_ids=None, attention_mask=None, past_key_values=None, use_cache=None, labels=None,
                return_dict=None, **kwargs):
        use_cache = self.config.use_cache if use_cache is None else use_cache
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache()
        hidden = self.model(input_ids, attention_mask, past_key_values if use_cache else None)
        head = self.model.word_embeddings.weight if self.lm_head is None else self.lm_head.weight
        logits = F.linear(hidden, head)
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(), labels[:, 1:].reshape(-1),
                                   ignore_index=-100)
        return CausalLMOutputWithPast(loss=loss, logits=logits, past_key_values=past_key_values if use_cache else None)
