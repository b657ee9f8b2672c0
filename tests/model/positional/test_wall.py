"""`wall` (Wall attention: per-channel forget gates) against flash-linear-attention's naive reference
(fla/ops/wall_attn/naive.py, fla-core's, loaded by path; it computes in float32, so float32's tolerance) and
against the formula written out here per (i, j, channel) in float64: forward and gradients of q, k, v and the
gate projection's weight and bias, on the written-out strategies, with a window and with packed documents;
the long-sequence bound (a strong gate over 2,048 tokens, where exp(-P) overflows even float64); the planner's
refusals; the KV cache against the full forward."""
import math
from pathlib import Path

import pytest
import torch
from tests.model.positional.fla_naive import naive
from tests.support.generation import PROMPTS, TRAIN_LENGTH, assert_cache_matches_full_forward, tiny_model

from megatron.model.attention import AttentionInputs, AttentionRun, plan_attention
from megatron.model.attention.registry import STRATEGIES
from megatron.model.attention.written_out import decayed_dot_products
from megatron.model.positional_embeddings import build_positional_embedding

H, D, L, HIDDEN = 2, 4, 12, 8
DOCUMENTS = torch.tensor([[0] * 5 + [1] * 7])


def fla_wall():
    """fla's naive_wall_attn, its file's code run as it is, but without its two imports from the fla package:
    importing fla runs its Triton kernels' setup, which fails on a CPU machine (as fla_naive.py says). They are
    the constant RCP_LN2 = 1 / ln 2 and the prefix sum chunk_global_cumsum (a Triton kernel), given here as the
    same sum in torch: P = cumsum(g) over each document's tokens, times `scale`. The scores, masks and softmax
    are fla's own code."""
    path = Path(naive("path_attn", "naive_path_attn").__code__.co_filename).parents[1] / "wall_attn" / "naive.py"
    if not path.is_file():
        pytest.skip(f"the installed fla-core has no {path}")
    source = path.read_text()
    imports = ("from fla.ops.utils.constant import RCP_LN2\n", "from fla.ops.utils.cumsum import chunk_global_cumsum\n")
    assert all(line in source for line in imports), f"{path} imports other names than these tests provide"
    for line in imports:
        source = source.replace(line, "")

    def prefix_sum(g, cu_seqlens=None, scale=1.0, **_):
        if cu_seqlens is None:
            return g.cumsum(1) * scale
        return torch.cat([g[:, a:b].cumsum(1) for a, b in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())],
                         dim=1) * scale
    namespace = {"RCP_LN2": 1 / math.log(2), "chunk_global_cumsum": prefix_sum}
    exec(compile(source, str(path), "exec"), namespace)
    return namespace["naive_wall_attn"]


def formula(q, k, v, g, *, window=None, documents=None):
    """softmax_j(sum_n q_in k_jn exp(P_in - P_jn) / sqrt(D)) v_j over j <= i (i - j < window, one document),
    P = cumsum(g) over the tokens, every (i, j, n) written out in float64."""
    P = g.cumsum(2)
    length = q.shape[2]
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    exponent = (P[:, :, :, None] - P[:, :, None, :]).masked_fill((j > i)[None, None, :, :, None], float("-inf"))
    scores = (q[:, :, :, None] * k[:, :, None] * exponent.exp()).sum(-1) / math.sqrt(q.shape[-1])
    visible = ((j <= i) & ((i - j < window) if window else True))[None, None]
    if documents is not None:
        visible = visible & (documents[:, None, :, None] == documents[:, None, None, :])
    return scores.masked_fill(~visible, float("-inf")).softmax(-1) @ v


def setup(seed=0, batch=1):
    torch.manual_seed(seed)
    pe = build_positional_embedding("wall", num_heads=H, head_dim=D, hidden_size=HIDDEN).double()
    with torch.no_grad():  # gates away from 1, so the decays matter over 12 tokens
        pe.gate_bias.copy_(torch.randn_like(pe.gate_bias))
        pe.gate_weight.normal_()
    q, k, v = (torch.randn(batch, H, L, D, dtype=torch.float64, requires_grad=True) for _ in range(3))
    x = torch.randn(batch, L, HIDDEN, dtype=torch.float64)
    return pe, q, k, v, x


def ours(pe, q, k, v, x, *, impl, window=None, documents=None, block_size=5, dtype=torch.float64):
    plan = plan_attention(pe, torch.arange(q.shape[2]),
                          AttentionRun(impl=impl, window=window, block_size=block_size, needs_grad=True, dropout_p=0.0,
                                       dtype=dtype, batch=q.shape[0], documents=documents))
    plan = plan.with_layer(pe.layer_values(x))
    return plan, plan.attend(q, k, v, 0.0)


def gradients(out, leaves):
    torch.manual_seed(5)
    return torch.autograd.grad((out * torch.randn_like(out)).sum(), leaves)


@pytest.mark.parametrize("layout", ["sequence", "window", "documents"])
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
def test_equals_fla_naive_and_the_float64_formula(impl, layout):
    window, documents = (4 if layout == "window" else None), (DOCUMENTS if layout == "documents" else None)
    pe, q, k, v, x = setup()
    plan, out = ours(pe, q, k, v, x, impl=impl, window=window, documents=documents)
    assert plan.name == {"sdpa": "sdpa_written_out", "blocked": "blocked"}[impl]
    g = pe.channel_decays(x)
    assert g.shape == (1, H, L, D) and bool((g <= 0).all())
    leaves = [q, k, v, pe.gate_weight, pe.gate_bias]
    expected = formula(q, k, v, g, window=window, documents=documents)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)
    ours_gradients = gradients(out, leaves)
    for got, want in zip(ours_gradients, gradients(expected, leaves)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)
    cu_seqlens = None if documents is None else torch.tensor([0, 5, L])
    theirs = fla_wall()(*(t.transpose(1, 2) for t in (q, k, v, pe.channel_decays(x))), scale=D ** -0.5,
                        window_size=window, cu_seqlens=cu_seqlens).transpose(1, 2).double().contiguous()
    assert theirs.is_contiguous()  # fla computes in float32 (its .float()): float32's tolerance
    torch.testing.assert_close(out, theirs, rtol=1e-5, atol=1e-5)
    for got, want in zip(ours_gradients, gradients(theirs, leaves)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("n, m, q_start, chunk", [(40, 40, 0, 7), (13, 70, 57, 16), (9, 9, 0, 32)])
def test_the_chunked_dot_products_equal_every_pair_written_out(n, m, q_start, chunk):
    torch.manual_seed(m)
    q, k = torch.randn(2, 3, n, 8, dtype=torch.float64), torch.randn(2, 3, m, 8, dtype=torch.float64)
    P = torch.nn.functional.logsigmoid(torch.randn(2, 3, m, 8, dtype=torch.float64)).cumsum(2)
    q_index, k_index = torch.arange(q_start, q_start + n), torch.arange(m)
    got = decayed_dot_products(q, k, P[:, :, q_start:q_start + n], P, q_index, k_index, chunk)
    exponent = P[:, :, q_start:q_start + n, None] - P[:, :, None]
    expected = (q[:, :, :, None] * k[:, :, None] * exponent.exp()).sum(-1)
    torch.testing.assert_close(got, expected.masked_fill(k_index[None, :] > q_index[:, None], 0), rtol=1e-12,
                               atol=1e-12)


def test_a_strong_gate_over_2048_tokens_stays_finite_and_exact():
    # g ~ -2.1 per token and channel: P reaches about -4,300, so exp(-P_j) alone overflows float64 (past 709);
    # the blocked path in float32 against the formula in float64 (one query chunk of 128 at a time).
    torch.manual_seed(1)
    length, heads, dim = 2048, 1, 4
    pe = build_positional_embedding("wall", num_heads=heads, head_dim=dim, hidden_size=HIDDEN)
    with torch.no_grad():
        pe.gate_bias.fill_(-2.0)
    q, k, v = (torch.randn(1, heads, length, dim) for _ in range(3))
    x = torch.randn(1, length, HIDDEN)
    _, out = ours(pe, q, k, v, x, impl="blocked", block_size=256, dtype=torch.float32)
    assert bool(torch.isfinite(out).all())
    g = pe.channel_decays(x).double().detach()
    assert float(g.cumsum(2).min()) < -1000
    P = g.cumsum(2)
    rows = []
    for a in range(0, length, 128):
        exponent = P[:, :, a:a + 128, None] - P[:, :, None]
        later = torch.arange(length)[None, :] > torch.arange(a, a + 128)[:, None]
        exponent = exponent.masked_fill(later[None, None, :, :, None], float("-inf"))
        scores = (q.double()[:, :, a:a + 128, None] * k.double()[:, :, None] * exponent.exp()).sum(-1) / math.sqrt(dim)
        rows.append(scores.masked_fill(later, float("-inf")).softmax(-1) @ v.double())
    torch.testing.assert_close(out.double(), torch.cat(rows, 2), rtol=2e-4, atol=2e-4)


def test_the_planner_runs_it_only_where_the_scores_are_written_out():
    pe = build_positional_embedding("wall", num_heads=H, head_dim=D, hidden_size=HIDDEN)
    inputs = AttentionInputs.describe(pe, torch.arange(512), None, None, window=None, block_size=128,
                                      needs_grad=True, dropout_p=0.0, dtype=torch.float32, batch=2)
    assert inputs.has("channel_decays") and inputs.has_terms
    assert sorted(n for n, s in STRATEGIES.items() if s.can_run(inputs) is None) == ["blocked", "sdpa_written_out"]
    for name in ("sdpa", "flex", "toeplitz"):
        assert "per-channel decays of the dot products" in STRATEGIES[name].can_run(inputs)
    # fla's Wall kernels (fla/ops/wall_attn) are CUDA-only and not wired in: its strategy refuses, saying which it runs
    assert "has none of them" in STRATEGIES["fla"].can_run(inputs)


@pytest.mark.parametrize("overrides", [{}, {"attention_window": 5}], ids=["wall", "window"])
def test_cached_generation_equals_a_full_forward(overrides):
    assert_cache_matches_full_forward(tiny_model("wall", **overrides), PROMPTS, 20)


def test_model_logits_at_1x_and_8x_the_training_length_agree_across_the_strategies():
    # The whole matrix (sdpa_written_out) and blocks of 8 queries (blocked, each block's chunks referenced at its
    # own first query) give one model's logits alike, with gates strong enough (bias -1: P ~ -1.3 a token) that a
    # global factoring would overflow float32 past ~70 tokens.
    models = [tiny_model("wall", attention_impl=impl, wall_gate_bias_init=-1.0) for impl in ("sdpa", "blocked")]
    for factor in (1, 8):
        ids = torch.randint(0, 256, (2, factor * TRAIN_LENGTH), generator=torch.Generator().manual_seed(factor))
        with torch.no_grad():
            whole, blocked = (model(ids) for model in models)
        assert bool(torch.isfinite(whole).all())
        torch.testing.assert_close(blocked, whole, rtol=1e-4, atol=1e-4)
