"""`attention-sink` (GPT-OSS's learnable sink): per layer and head one logit s_h in each query's softmax whose
column is dropped, o' = o * sigmoid(lse - s_h), applied by the written-out attention block. Equal in float64,
forward and backward, to the pinned transformers' gpt_oss eager attention (the sink's column concatenated to the
logits, the softmax taken, the column dropped) on random tensors, on every strategy that takes it; refused with
its reason by the others and with a method that replaces the softmax; through the model, KERPLE-log + sink
decodes with the KV cache as the full forward does at 4x the training length (its export: the HF-export test)."""
import types

import pytest
import torch
from tests.support.hf_export import greedy_reference, tiny_config
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

from megatron.errors import NeoXArgsError
from megatron.evaluation.labels import switch_labels
from megatron.model import GPTModel
from megatron.model.attention import AttentionRun, plan_attention
from megatron.model.attention.choice import StrategyCannotRun
from megatron.model.model_config import ModelConfig, differences
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.to_model import model_config
from megatron.text_generation import generate_tokens
from megatron.tokenizer import build_tokenizer
from tools.ckpts.hf_export.native import native_problems

B, H, S, D = 2, 4, 24, 8


def gpt_oss(q, k, v, sinks, bias):
    """transformers' gpt_oss eager attention (its own function, one key head per query head): the causal mask
    and the method's bias as its additive mask, the sinks in the softmax. -> [b, H, s, D]."""
    module = types.SimpleNamespace(num_key_value_groups=1, sinks=sinks, training=False)
    mask = torch.full((S, S), float("-inf"), dtype=torch.float64).triu(1)
    if bias is not None:
        mask = mask + bias.double()  # [H, s, s], or [b, H, s, s] with a weight folded in
    while mask.dim() < 4:  # [s, s] or [H, s, s] -> [b | 1, H | 1, s, s]
        mask = mask[None]
    out, _ = eager_attention_forward(module, q, k, v, mask, scaling=D ** -0.5)
    return out.transpose(1, 2)


def random_inputs():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, H, S, D, dtype=torch.float64, generator=g, requires_grad=True) for _ in range(3))
    sinks = (2 * torch.randn(H, dtype=torch.float64, generator=g)).requires_grad_()
    return q, k, v, sinks


@pytest.mark.parametrize("strategy", ["sdpa_written_out", "blocked", "sdpa_sink", "toeplitz", "toeplitz_table_gradient",
                                      "sdpa_table_gradient", "blocked_table_gradient",
                                      "toeplitz_weighted_table_gradient"])
@pytest.mark.parametrize("method", ["none", "alibi", "kerple_log", "kerple_bias_weight"])
def test_the_sink_equals_gpt_oss_eager_attention_forward_and_backward(method, strategy):
    pe = build_positional_embedding(method, num_heads=H, head_dim=D, hidden_size=H * D)
    positions = torch.arange(S)
    bias, weight = pe.pairwise(positions, positions)
    q, k, v, sinks = random_inputs()
    if weight is not None:  # transformers' function takes q.k * scaling; fold the weight into the bias it adds
        bias = bias + (q @ k.transpose(-1, -2)) * D ** -0.5 * (weight.double() - 1)
    expected = gpt_oss(q, k, v, sinks, bias)
    try:
        plan = plan_attention(pe, positions, AttentionRun(needs_grad=True, dtype=torch.float64, batch=B, block_size=8,
                                                          sink=True), strategy=strategy).with_layer({"sink": sinks})
    except StrategyCannotRun as refusal:
        pytest.skip(refusal.reason)
    assert plan.name == strategy
    got = plan.attend(*plan.rotate(q, k), v, 0.0)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
    upstream = torch.randn_like(expected)
    want = torch.autograd.grad(expected, (q, k, v, sinks), upstream, retain_graph=True)
    for ours, theirs in zip(torch.autograd.grad(got, (q, k, v, sinks), upstream), want):
        torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)


def test_strategies_without_the_log_sum_exp_refuse_it_and_auto_takes_one_that_has_it():
    pe = build_positional_embedding("alibi", num_heads=H, head_dim=D, hidden_size=H * D)
    run = AttentionRun(sink=True)
    for strategy in ("sdpa", "flex"):
        with pytest.raises(StrategyCannotRun, match="does not handle a learnable attention sink"):
            plan_attention(pe, torch.arange(S), run, strategy=strategy)
    assert plan_attention(pe, torch.arange(S), run).name == "toeplitz"  # the flash kernel, from (O', lse')
    assert plan_attention(pe, torch.arange(S), AttentionRun(impl="sdpa", sink=True)).name == "sdpa_sink"
    dropout = AttentionRun(impl="sdpa", sink=True, dropout_p=0.1)  # the flash kernel is called without dropout
    assert plan_attention(pe, torch.arange(S), dropout).name == "sdpa_written_out"
    kerple = build_positional_embedding("kerple_log", num_heads=H, head_dim=D, hidden_size=H * D)
    training = AttentionRun(sink=True, needs_grad=True)
    assert plan_attention(kerple, torch.arange(S), training).name == "toeplitz_table_gradient"
    # Off the CPU the table gradient's forward is SDPA's, which returns no log-sum-exp: refused with that reason.
    from megatron.model.attention import AttentionInputs
    from megatron.model.attention.registry import STRATEGIES
    bias, weight = kerple.distance_tables_at(torch.arange(S), S)
    cuda = AttentionInputs.describe(kerple, torch.arange(S), bias, weight, window=None, block_size=8, needs_grad=True,
                                    dropout_p=0.0, dtype=torch.float32, batch=B, sink=True
                                    ).with_run(device_type="cuda")
    assert "off the CPU, where SDPA's fused kernels return no log-sum-exp" in \
        STRATEGIES["sdpa_table_gradient"].can_run(cuda)
    assert STRATEGIES["sdpa_written_out"].can_run(cuda) is None
    stickbreaking = build_positional_embedding("stickbreaking", num_heads=H, head_dim=D, hidden_size=H * D)
    with pytest.raises(NeoXArgsError, match="attention-sink is set, but this positional method replaces the softmax"):
        plan_attention(stickbreaking, torch.arange(S), run)


def test_kerple_with_a_sink_decodes_with_the_cache_as_the_full_forward_does():
    """(The HF export of a sink model: tests/checkpoint/test_hf_export.py's `sink` case.)"""
    args = NeoXArgs.from_dict(tiny_config("kerple_log") | {"attention_sink": True})
    torch.manual_seed(0)
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size)).eval()
    sinks = [p for name, p in model.named_parameters() if name.endswith("attention.sink")]
    assert len(sinks) == args.num_layers
    with torch.no_grad():  # sinks far from 0, so that the test sees them
        for sink in sinks:
            sink.normal_(0.0, 2.0)
    prompt = [5, 17, 3, 99, 42]
    new = 4 * args.seq_length - len(prompt)
    assert generate_tokens(model, [prompt], max_new_tokens=new)[0] == greedy_reference(model, prompt, new)
    assert any("attention-sink" in problem for problem in native_problems(model.config))


def test_the_checkpoint_and_the_result_labels_record_the_sink():
    sunk = model_config(NeoXArgs.from_dict(tiny_config("alibi") | {"attention_sink": True}), 384)
    plain = model_config(NeoXArgs.from_dict(tiny_config("alibi")), 384)
    assert ModelConfig.from_record(sunk.record()) == sunk
    assert differences(sunk, plain) == ["attention-sink: checkpoint True, this run None"]
    assert "sink" in switch_labels(NeoXArgs.from_dict(tiny_config("alibi") | {"attention_sink": True}))
    assert "sink" not in switch_labels(NeoXArgs.from_dict(tiny_config("alibi")))


def test_the_dry_run_plans_a_strategy_that_takes_the_sink_and_refuses_it_with_a_normaliser():
    from megatron.model.layer_pattern import training_plans
    args = NeoXArgs.from_dict(tiny_config("kerple_log") | {"attention_sink": True})
    (line,) = training_plans(model_config(args, None), args.seq_length, 1, False)
    assert "): toeplitz_table_gradient, about" in line, line
    args = NeoXArgs.from_dict(tiny_config("stickbreaking") | {"attention_sink": True})
    with pytest.raises(NeoXArgsError, match="attention-sink is set, but this positional method replaces the softmax"):
        training_plans(model_config(args, None), args.seq_length, 1, False)


def test_the_sink_on_fox_folded_evaluation_blocks_equals_the_reference():
    """fox's evaluation path (the terms folded into one row per block, blocks merged by their log-sum-exps) takes
    each row's log-sum-exp back from the merge for the sink: against the reference's sink column, in float64 with
    blocks of 8 (three blocks: one alone, two merged with their past)."""
    from megatron.model.attention import reference
    from megatron.model.attention.token_terms import folded_token_terms_attention
    pe = build_positional_embedding("fox", num_heads=H, head_dim=D, hidden_size=H * D).double()
    q, k, v, sinks = (t.detach() for t in random_inputs())
    g = pe.token_terms(torch.randn(B, S, H * D, dtype=torch.float64, generator=torch.Generator().manual_seed(1)))
    with torch.no_grad():
        g = g.double() - 0.5 * torch.rand(g.shape, dtype=torch.float64)  # strong forgetting: the shifts matter
        got = folded_token_terms_attention(q, k, v, g.cumsum(-1), block=8, sink=sinks)
        expected = reference.attention(q, k, v, pe, torch.arange(S), token_terms=g, sink=sinks)
    torch.testing.assert_close(got, expected, atol=1e-12, rtol=0)
