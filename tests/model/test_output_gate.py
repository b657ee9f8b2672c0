"""`attention-output-gate` (transformer.py's OutputGate): per channel against the pinned transformers' own gated
attention (Qwen3-Next's `Qwen3NextAttention`, whose q_proj also gives the gate) in float64, forward and backward;
per head against the paper's formula written here; through the model: KERPLE-log + gate decodes with the KV
cache as the full forward does at 4x the training length, the Hugging Face export gives the same logits, the
checkpoint and the result labels record it, and a plain GPT-NeoX export refuses it."""
import math

import pytest
import torch
import transformers
from tests.support.hf_export import tiny_config
from transformers.models.qwen3_next.configuration_qwen3_next import Qwen3NextConfig
from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextAttention

from megatron.errors import NeoXArgsError
from megatron.evaluation.labels import switch_labels, trained_parts
from megatron.model import GPTModel
from megatron.model.model_config import ModelConfig, differences
from megatron.model.transformer import OutputGate
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.to_model import model_config
from megatron.tokenizer import build_tokenizer
from tools.ckpts.hf_export.native import native_problems

H, D, S = 4, 8, 24


def causal_attention_keeping_its_output(seen):
    """An attention function for transformers' interface: plain causal softmax in float64, its output kept."""
    def attention(module, q, k, v, mask, scaling, dropout=0.0, **kwargs):
        logits = (q @ k.transpose(-1, -2)) * scaling
        logits = logits.masked_fill(torch.ones(S, S, dtype=torch.bool).triu(1), float("-inf"))
        out = (logits.softmax(-1) @ v).transpose(1, 2)  # [b, s, H, D], as transformers' functions return it
        seen.append(out)
        return out, None
    return attention


def test_a_channel_gate_equals_qwen3_nexts_gated_attention_forward_and_backward():
    config = Qwen3NextConfig(hidden_size=H * D, num_attention_heads=H, num_key_value_heads=H, head_dim=D,
                             attention_bias=False, num_hidden_layers=1)
    seen = []
    transformers.AttentionInterface.register("keep_output", causal_attention_keeping_its_output(seen))
    config._attn_implementation = "keep_output"
    torch.manual_seed(0)
    theirs = Qwen3NextAttention(config, layer_idx=0).double()
    x = torch.randn(1, S, H * D, dtype=torch.float64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    identity = (torch.ones(1, S, D, dtype=torch.float64), torch.zeros(1, S, D, dtype=torch.float64))
    expected, _ = theirs(x, position_embeddings=identity, attention_mask=None)
    (y,) = seen  # attention's output before the gate, in the graph of x

    args = NeoXArgs.from_dict(tiny_config("none") | {"attention_output_gate": "channel"})
    gate = OutputGate(model_config(args, 384)).double()
    assert (gate.heads, gate.head_dim) == (H, D)
    with torch.no_grad():  # Qwen3-Next's q_proj holds per head its D query rows, then its D gate rows
        gate.gate.weight.copy_(theirs.q_proj.weight.view(H, 2 * D, H * D)[:, D:].reshape(H * D, H * D))
    ours = theirs.o_proj(gate(x, y).reshape(1, S, H * D))
    torch.testing.assert_close(ours, expected, atol=1e-12, rtol=0)

    upstream = torch.randn_like(expected)
    theirs_grads = torch.autograd.grad(expected, [x, theirs.q_proj.weight], upstream, retain_graph=True)
    ours_grads = torch.autograd.grad(ours, [x, gate.gate.weight], upstream)
    torch.testing.assert_close(ours_grads[0], theirs_grads[0], atol=1e-12, rtol=0)
    gate_rows = theirs_grads[1].view(H, 2 * D, H * D)[:, D:].reshape(H * D, H * D)
    torch.testing.assert_close(ours_grads[1], gate_rows, atol=1e-12, rtol=0)


def test_a_head_gate_is_one_sigmoid_per_head():
    args = NeoXArgs.from_dict(tiny_config("none") | {"attention_output_gate": "head"})
    gate = OutputGate(model_config(args, 384)).double()
    x = torch.randn(2, S, gate.gate.in_features, dtype=torch.float64)
    y = torch.randn(2, S, gate.heads, gate.head_dim, dtype=torch.float64)
    w = gate.gate.weight.detach()  # [H, hidden]
    expected = torch.empty_like(y)
    for b in range(2):
        for s in range(S):
            for h in range(gate.heads):
                expected[b, s, h] = y[b, s, h] / (1 + math.exp(-float(x[b, s] @ w[h])))
    torch.testing.assert_close(gate(x, y), expected, atol=1e-12, rtol=0)


@pytest.mark.parametrize("kind", ["head", "channel"])
def test_kerple_with_a_gate_has_one_per_layer_and_gpt_neox_cannot_hold_it(kind):
    """(Its cached decoding and export: tests/checkpoint/test_hf_export.py, cases output-gate-head and -channel.)"""
    args = NeoXArgs.from_dict(tiny_config("kerple_log") | {"attention_output_gate": kind})
    torch.manual_seed(0)
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size)).eval()
    assert sum(name.endswith("output_gate.gate.weight") for name, _ in model.named_parameters()) == args.num_layers
    assert any("output-gate" in problem for problem in native_problems(model.config))


def test_the_checkpoint_records_the_gate_and_a_bad_value_is_refused():
    gated = model_config(NeoXArgs.from_dict(tiny_config("alibi") | {"attention_output_gate": "head"}), 384)
    plain = model_config(NeoXArgs.from_dict(tiny_config("alibi")), 384)
    assert ModelConfig.from_record(gated.record()) == gated
    assert differences(gated, plain) == ["attention-output-gate: checkpoint 'head', this run None"]
    gated_args = NeoXArgs.from_dict(tiny_config("alibi") | {"attention_output_gate": "head"})
    assert "gate-head" in switch_labels(gated_args) and "head gate" in trained_parts(gated_args)
    assert not any("gate" in label for label in switch_labels(NeoXArgs.from_dict(tiny_config("alibi"))))
    with pytest.raises(NeoXArgsError, match=r"attention-output-gate"):
        NeoXArgs.from_dict(tiny_config("alibi") | {"attention_output_gate": "per-token"})
