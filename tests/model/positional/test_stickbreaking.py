"""`stickbreaking` (arXiv 2410.17980) against the paper's formula written out here in float64 as explicit
products, A_ij = sigmoid(z_ij) * prod_{j < l < i} (1 - sigmoid(z_il)), z = q.k / sqrt(D), on every path
that runs it (forward and gradients; a window, packed documents, block boundaries), and against
flash-linear-attention's naive reference (fla/ops/stickbreaking_attn/naive.py, fla-core 0.6.0, loaded by
path), both with and without the query's own token; the planner's refusals; the KV cache, the Hugging Face
export and the entry points."""
import math

import pytest
import torch
from tests.model.positional.fla_naive import naive
from tests.support.generation import PROMPTS, assert_cache_matches_full_forward, tiny_model

from megatron.model.attention import AttentionInputs, AttentionRun, plan_attention
from megatron.model.attention.choice import choose_strategy
from megatron.model.attention.registry import STRATEGIES
from megatron.model.layer_pattern import training_plans
from megatron.neox_arguments.to_model import model_config
from megatron.model.positional_embeddings import PositionalEmbeddingError, build_positional_embedding
from megatron.model.positional_embeddings.dape import daped
from megatron.model.positional_embeddings.temperature import tempered
from megatron.neox_arguments import NeoXArgs

H, D, L = 2, 8, 20


def paper_formula(q, k, v, *, attend_current=False, window=None, documents=None):
    """out_i = sum_j A_ij v_j over the keys query i sees (j < i, or j <= i with attend_current; i - j < window;
    the same document), A_ij = sigmoid(z_ij) * prod of (1 - sigmoid(z_il)) over the seen l strictly between
    j and i (and l = i with attend_current). q, k, v [b, H, L, D] float64."""
    b, _, length, dim = q.shape
    z = q @ k.transpose(-1, -2) / math.sqrt(dim)
    beta = torch.sigmoid(z)

    def sees(row, i, j):
        return ((j < i or (attend_current and j == i)) and (window is None or i - j < window)
                and (documents is None or documents[row, i] == documents[row, j]))

    out = torch.zeros_like(q)
    for row in range(b):
        for i in range(length):
            for j in range(length):
                if not sees(row, i, j):
                    continue
                share = beta[row, :, i, j]
                for l in range(j + 1, length):
                    if sees(row, i, l):
                        share = share * (1 - beta[row, :, i, l])
                out[row, :, i] = out[row, :, i] + share[:, None] * v[row, :, j]
    return out


def qkv(seed=0, batch=2, requires_grad=True):
    torch.manual_seed(seed)
    return [(2 * torch.randn(batch, H, L, D, dtype=torch.float64)).requires_grad_(requires_grad) for _ in range(3)]


def ours(q, k, v, *, impl, attend_current=False, window=None, documents=None, needs_grad=True, block_size=8):
    pe = build_positional_embedding("stickbreaking", num_heads=H, head_dim=D, hidden_size=H * D,
                                    stickbreaking_attend_current=attend_current).double()
    plan = plan_attention(pe, torch.arange(q.shape[2]), AttentionRun(impl=impl, window=window, block_size=block_size,
                                                                     needs_grad=needs_grad, dropout_p=0.0,
                                                                     dtype=torch.float64, batch=q.shape[0],
                                                                     documents=documents))
    return plan, plan.attend(q, k, v, 0.0)


def gradients(out, tensors):
    torch.manual_seed(5)
    return torch.autograd.grad((out * torch.randn_like(out)).sum(), tensors)


DOCUMENTS = torch.tensor([[0] * 7 + [1] * 13, [0] * 3 + [1] * 9 + [2] * 8])


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("layout", ["sequence", "window", "documents"])
@pytest.mark.parametrize("impl", ["sdpa", "blocked", "auto"])
def test_every_path_equals_the_paper_formula(impl, layout, attend_current):
    window, documents = (6 if layout == "window" else None), (DOCUMENTS if layout == "documents" else None)
    q, k, v = qkv()
    plan, out = ours(q, k, v, impl=impl, attend_current=attend_current, window=window, documents=documents)
    assert plan.name == {"sdpa": "sdpa_written_out", "blocked": "blocked", "auto": plan.name}[impl]
    expected = paper_formula(q, k, v, attend_current=attend_current, window=window, documents=documents)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    for got, want in zip(gradients(out, (q, k, v)), gradients(expected, (q, k, v))):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


def test_the_first_token_of_each_document_sees_no_key_and_a_row_sums_to_at_most_one():
    q, k, v = qkv(requires_grad=False)
    _, out = ours(q, k, torch.ones_like(v), impl="blocked", documents=DOCUMENTS, needs_grad=False)
    assert out[0, :, [0, 7]].abs().max() == 0 and out[1, :, [0, 3, 12]].abs().max() == 0
    assert out.max() <= 1 and out[0, :, 1:7].min() > 0  # the weights of a row are shares of one stick


@pytest.mark.parametrize("attend_current", [False, True])
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
def test_matches_flash_linear_attentions_naive_reference(impl, attend_current):
    fla_stickbreaking = naive("stickbreaking_attn", "naive_stickbreaking_attn")
    q, k, v = qkv(seed=3)
    _, out = ours(q, k, v, impl=impl, attend_current=attend_current)
    theirs, _ = fla_stickbreaking(*(t.transpose(1, 2) for t in (q, k, v)), attend_current=attend_current)
    theirs = theirs.transpose(1, 2)  # fla: [B, T, H, D]
    torch.testing.assert_close(out, theirs, rtol=1e-10, atol=1e-12)
    for got, want in zip(gradients(out, (q, k, v)), gradients(theirs, (q, k, v))):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


def test_the_planner_runs_it_only_where_the_weights_are_written_out():
    pe = build_positional_embedding("stickbreaking", num_heads=H, head_dim=D, hidden_size=H * D)
    inputs = AttentionInputs.describe(pe, torch.arange(512), None, None, window=None, block_size=128,
                                      needs_grad=True, dropout_p=0.0, dtype=torch.float32, batch=2)
    assert inputs.has("normaliser") and inputs.has_terms
    runs = sorted(name for name, strategy in STRATEGIES.items() if strategy.can_run(inputs) is None)
    assert runs == ["blocked", "sdpa_written_out"]
    for name in ("sdpa", "flex", "toeplitz"):
        assert "a method that replaces the softmax" in STRATEGIES[name].can_run(inputs)
    assert choose_strategy("auto", inputs, 2**30).name == "blocked"  # O(block x L): no L x L tensor
    # The blocked estimate grows linearly with the length (a block of queries against L keys).
    longer = AttentionInputs.describe(pe, torch.arange(1024), None, None, window=None, block_size=128,
                                      needs_grad=True, dropout_p=0.0, dtype=torch.float32, batch=2)
    assert STRATEGIES["blocked"].memory_bytes(longer) == 2 * STRATEGIES["blocked"].memory_bytes(inputs)


@pytest.mark.parametrize("overrides", [{"attention_window": 5}, {"stickbreaking_attend_current": True}],
                         ids=["window", "attend-current"])
def test_cached_generation_equals_a_full_forward(overrides):
    assert_cache_matches_full_forward(tiny_model("stickbreaking", **overrides), PROMPTS, 20)


def test_a_wrapper_that_would_bring_the_softmax_back_is_refused():
    pe = build_positional_embedding("stickbreaking", num_heads=H, head_dim=D, hidden_size=H * D)
    with pytest.raises(PositionalEmbeddingError, match="attention-temperature is set, but pos-emb 'stickbreaking' "
                                                       "replaces the softmax"):
        tempered(pe, {"type": "ssmax"})
    with pytest.raises(PositionalEmbeddingError, match="dape is set, but pos-emb 'stickbreaking' replaces the softmax"):
        daped(pe, {"version": 2, "hidden": 4})


def test_dry_run_plans_show_the_blocked_strategy():
    args = NeoXArgs.from_dict({"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq_length": 64,
                               "train_micro_batch_size_per_gpu": 1, "pos_emb": "stickbreaking",
                               "stickbreaking_attend_current": True, "tokenizer_type": "ByteLevelTokenizer"})
    assert "blocked" in training_plans(model_config(args, None), args.seq_length, 1, False)[0]


def test_a_checkpoint_records_the_option_that_changes_the_attention():
    from megatron.model.positional_embeddings import checkpoint_options
    # a checkpoint loaded with the other value is refused
    assert checkpoint_options("stickbreaking") == ("stickbreaking_attend_current",)
