"""`fox` (the Forgetting Transformer's forget gate) against x-transformers' DataDependentAlibi and its
Attention (requirements-dev.txt pins it), forward and gradients, with the gate and projections copied
across; every attention path against a float64 formula written here from the paper,
score(i, j) = q_i . k_j / sqrt(D) + sum_{l=j+1..i} log sigmoid(w_h . x_l + b_h), as explicit sums;
the KV cache against a full forward; the Hugging Face export; one gate per layer; the entry points.

x-transformers' conventions, read from its source (not copied): the gate is LogSigmoid(Linear(x))
with the bias initialised to 5, cumulated along the sequence, and F_i - F_j added to the scaled scores;
its attention projections have no bias. Its gate weights keep their own (kaiming-uniform) initial
values and its biases are set to random values here, so forgetting is strong and heads differ."""
import pytest
import torch
from tests.support.generation import PROMPTS, assert_cache_matches_full_forward, tiny_model
from x_transformers.x_transformers import Attention

from megatron.errors import NeoXArgsError
from megatron.model.attention import AttentionInputs, AttentionRun, attend, plan_attention
from megatron.model.attention.choice import choose_strategy
from megatron.model.attention import token_terms
from megatron.model.attention.registry import STRATEGIES
from megatron.model.attention.sdpa import Sdpa
from megatron.model.attention.flex_kernel import reference_math
from megatron.model.attention.cached import CachedPlan
from megatron.model.layer_pattern import describe_layers, training_plans
from megatron.neox_arguments.to_model import model_config
from megatron.model.positional_embeddings import PositionalEmbeddingError, build_positional_embedding
from megatron.model.positional_embeddings.temperature import tempered
from megatron.neox_arguments import NeoXArgs
from tests.support.fox import D, H, float64_reference, theirs_and_ours


def test_x_transformers_starts_its_gate_bias_at_5_as_we_do():
    attention = Attention(dim=H * D, heads=H, dim_head=D, causal=True, data_dependent_alibi=True)
    ours = build_positional_embedding("fox", num_heads=H, head_dim=D, hidden_size=H * D)
    torch.testing.assert_close(attention.data_dependent_alibi.to_forget_gates[0].bias.detach(), ours.gate_bias.detach())


@pytest.mark.parametrize("length", [7, 40])
def test_bias_and_gradients_match_data_dependent_alibi(length):
    attention, gate, pe = theirs_and_ours()
    x = torch.randn(2, length, H * D, requires_grad=True)
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    theirs = attention.data_dependent_alibi(x)[..., causal]  # [b, H, pairs]: F_i - F_j, j <= i
    F = pe.token_terms(x).cumsum(dim=-1)
    ours = (F[..., :, None] - F[..., None, :])[..., causal]
    torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)
    cotangent = torch.randn_like(ours)
    grads_theirs = torch.autograd.grad((theirs * cotangent).sum(), (x, gate.weight, gate.bias))
    grads_ours = torch.autograd.grad((ours * cotangent).sum(), (x, pe.gate_weight, pe.gate_bias))
    for a, b in zip(grads_ours, grads_theirs):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("strategy", ["sdpa", "blocked_token_terms", "blocked"])
def test_attention_output_and_gradients_match_x_transformers(strategy, monkeypatch):
    monkeypatch.setattr(token_terms, "TOKEN_TERMS_BLOCK", 16)  # three blocks of queries, the last partial
    attention, gate, pe = theirs_and_ours(seed=1)
    b, length = 2, 45
    x = torch.randn(b, length, H * D, requires_grad=True)
    expected = attention(x)

    split = lambda t: t.view(b, length, H, D).transpose(1, 2)  # noqa: E731  [b, H, L, D]
    q, k, v = split(attention.to_q(x)), split(attention.to_k(x)), split(attention.to_v(x))
    positions = torch.arange(length)
    assert STRATEGIES[strategy].can_run(inputs_for(pe, batch=b, length=length)) is None
    plan = STRATEGIES[strategy](pe, positions, window=None, block_size=16, span=length, dtype=torch.float32,
                                bias_table=None, weight_table=None)
    y = attend(q, k, v, plan.with_layer(pe.layer_values(x)))
    ours = attention.to_out(y.transpose(1, 2).reshape(b, length, H * D))
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)
    cotangent = torch.randn_like(ours)
    grads_theirs = torch.autograd.grad((expected * cotangent).sum(), (x, gate.weight, gate.bias))
    grads_ours = torch.autograd.grad((ours * cotangent).sum(), (x, pe.gate_weight, pe.gate_bias))
    for a, b_ in zip(grads_ours, grads_theirs):
        torch.testing.assert_close(a, b_, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("window", [None, 9])
@pytest.mark.parametrize("impl, needs_grad", [("sdpa", True), ("sdpa", False), ("blocked", True),
                                              ("blocked", False), ("blocked-general", True), ("flex", False),
                                              ("auto", False)])
def test_every_path_equals_the_float64_formula(impl, needs_grad, window):
    _, _, pe = theirs_and_ours(seed=2)
    b, length = 2, 150  # two blocks of blocked_token_terms
    torch.manual_seed(3)
    x = torch.randn(b, length, H * D)
    q, k, v = (torch.randn(b, H, length, D) for _ in range(3))
    with torch.set_grad_enabled(needs_grad), reference_math():
        if impl == "blocked-general":  # the gathered blocks any method runs on, any device
            plan = STRATEGIES["blocked"](pe, torch.arange(length), window=window, block_size=16, span=length,
                                         dtype=torch.float32, bias_table=None, weight_table=None)
        else:
            plan = plan_attention(pe, torch.arange(length), AttentionRun(impl=impl, window=window, block_size=16,
                                                                         needs_grad=needs_grad, dropout_p=0.0))
        ours = attend(q, k, v, plan.with_layer(pe.layer_values(x)))
        without = attend(q, k, v, plan)
    expected = float64_reference(q, k, v, x, pe.gate_weight.detach(), pe.gate_bias.detach(), window)
    torch.testing.assert_close(ours.detach().double(), expected, rtol=0, atol=2e-5)
    if impl in ("auto", "blocked"):
        assert plan.name == "blocked_token_terms"  # on CPU: the flash kernel per block, F_i - F_j from two O(L) buffers
    # Without the forget terms the answer differs: the check above is not passed by construction.
    assert (without.detach().double() - expected).abs().max() > 1e-2


def inputs_for(pe, *, batch=1, needs_grad=True, length=512):
    return AttentionInputs.describe(pe, torch.arange(length), None, None, window=None, block_size=128,
                                    needs_grad=needs_grad, dropout_p=0.0, dtype=torch.float32, batch=batch)


def test_the_planner_knows_the_class_the_paths_and_the_memory():
    pe = build_positional_embedding("fox", num_heads=H, head_dim=D, hidden_size=H * D)
    inputs = inputs_for(pe)
    assert inputs.has("token_terms") and inputs.has_terms
    assert choose_strategy("auto", inputs, 2**30).name == "blocked_token_terms"  # not the Toeplitz row: it refuses
    with pytest.raises(NeoXArgsError, match=r"attention-impl is 'flex', but torch's FlexAttention has no backward"):
        choose_strategy("flex", inputs, 2**30)
    from megatron.model.attention.toeplitz import Toeplitz
    assert "per-token terms" in Toeplitz.can_run(inputs)
    # The sdpa path's mask is each row's own: its estimate grows with the batch, unlike a shared table's.
    one, four = Sdpa.memory_bytes(inputs), Sdpa.memory_bytes(inputs_for(pe, batch=4))
    assert four > 3 * one
    alibi = build_positional_embedding("alibi", num_heads=H, head_dim=D, hidden_size=H * D)
    table = alibi.distance_tables(512)[0]
    alibi_inputs = [AttentionInputs.describe(alibi, torch.arange(512), table, None, window=None, block_size=128,
                                             needs_grad=False, dropout_p=0.0, dtype=torch.float32, batch=n)
                    for n in (1, 4)]
    assert Sdpa.memory_bytes(alibi_inputs[0]) == Sdpa.memory_bytes(alibi_inputs[1])
    # A decoding step keeps F beside the cached keys: O(L) more, H fp32 values a slot.
    sizes = dict(batch=2, heads=H, head_dim=D, queries=1, keys=100, capacity=300, element_size=4,
                 pairwise_bytes=0, has_weight=False)
    extra = CachedPlan.memory_bytes(**sizes, token_terms=True) - CachedPlan.memory_bytes(**sizes)
    assert extra == 2 * H * 300 * 4 + 2 * 1 * 100 * 8 * H


def test_the_gate_learns_through_a_model_with_one_gate_per_layer():
    model = tiny_model("fox", num_layers=3, attention_impl="auto")
    assert len(model.pos_embs) == 3 and model.layer_module == [0, 1, 2]  # per_layer: each layer its own gate
    model.train()
    model(torch.randint(0, 258, (2, 20))).square().mean().backward()
    grads = [pe.gate_weight.grad for pe in model.pos_embs]
    assert all(g is not None and g.abs().sum() > 0 for g in grads)
    assert not torch.equal(grads[0], grads[1])


def test_cached_generation_with_a_window_equals_a_full_forward():
    assert_cache_matches_full_forward(tiny_model("fox", attention_window=5), PROMPTS, 20)


def test_a_layer_pattern_with_the_gate_gives_every_layer_its_module():
    model = tiny_model("fox", num_layers=4, layer_pattern=[{"pos-emb": "fox"}, {"pos-emb": "alibi"}])
    assert [pe.name for pe in model.pos_embs] == ["fox", "alibi", "fox", "alibi"] and model.layer_module == [0, 1, 2, 3]
    assert_cache_matches_full_forward(model, PROMPTS, 12)


def test_dry_run_lines_show_one_module_per_layer_and_the_strategy():
    args = NeoXArgs.from_dict({"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq_length": 64,
                               "train_micro_batch_size_per_gpu": 1, "pos_emb": "fox",
                               "tokenizer_type": "ByteLevelTokenizer"})
    model = model_config(args, None)
    assert describe_layers(model).splitlines()[1].endswith("# positional module 1")
    assert "blocked_token_terms" in training_plans(model, args.seq_length, 1, False)[0]


def test_a_temperature_on_top_of_the_gate_is_refused():
    pe = build_positional_embedding("fox", num_heads=H, head_dim=D, hidden_size=H * D)
    with pytest.raises(PositionalEmbeddingError, match="attention-temperature is set, but pos-emb 'fox'"):
        tempered(pe, {"type": "ssmax"})
