"""`path` (PaTH attention, arXiv 2505.16381) against the paper's formula written out here in float64 with
explicit D x D matrices, score(i, j) = q_i^T H_i H_{i-1} ... H_{j+1} k_j / sqrt(D), H_t = I - beta_t w_t w_t^T
(and the forget gate's sum of log f between them), on every path that runs it (forward and gradients of
q, k, v, w and beta; a window, packed documents, block boundaries), and against flash-linear-attention's
naive reference (fla/ops/path_attn/naive.py, fla-core 0.6.0, loaded by path; it computes in float32, so
the tolerance is float32's); the method's w and beta; the planner; the KV cache, the Hugging Face export
and the entry points."""
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
from megatron.model.positional_embeddings.temperature import tempered
from megatron.neox_arguments import NeoXArgs

H, D, L = 2, 4, 12
DOCUMENTS = torch.tensor([[0] * 5 + [1] * 7, [0] * 3 + [1] * 6 + [2] * 3])


def paper_formula(q, k, v, w, beta, *, log_f=None, window=None, documents=None):
    """softmax over the keys query i sees (j <= i, i - j < window, the same document) of
    q_i^T (H_i ... H_{j+1}) k_j / sqrt(D) + sum_{l=j+1..i} log f_l, each product of D x D matrices written out."""
    b, heads, length, dim = q.shape
    eye = torch.eye(dim, dtype=q.dtype)
    householder = eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]  # [b, H, L, D, D]
    out = []
    for row in range(b):
        rows = []
        for i in range(length):
            logits, values = [], []
            for j in range(i + 1):
                if (window is not None and i - j >= window) or (documents is not None
                                                                and documents[row, i] != documents[row, j]):
                    continue
                product = eye.expand(heads, dim, dim)
                for t in range(i, j, -1):
                    product = product @ householder[row, :, t]
                logit = (q[row, :, i, None, :] @ product @ k[row, :, j, :, None])[:, 0, 0] / math.sqrt(dim)
                if log_f is not None:
                    logit = logit + log_f[row, :, j + 1:i + 1].sum(-1)
                logits.append(logit)
                values.append(v[row, :, j])
            weights = torch.stack(logits, -1).softmax(-1)                  # [H, seen]
            rows.append((weights[:, :, None] * torch.stack(values, 1)).sum(1))
        out.append(torch.stack(rows, 1))
    return torch.stack(out)


def tensors(seed=0, batch=2, forget_gate=False):
    """q, k, v [b, H, L, D], unit w [b, H, L, D], beta in (0, 2) [b, H, L] (and log f), float64 leaves."""
    torch.manual_seed(seed)
    q, k, v = (torch.randn(batch, H, L, D, dtype=torch.float64) for _ in range(3))
    w = torch.nn.functional.normalize(torch.randn(batch, H, L, D, dtype=torch.float64), dim=-1)
    beta = 2 * torch.rand(batch, H, L, dtype=torch.float64)
    log_f = torch.nn.functional.logsigmoid(torch.randn(batch, H, L, dtype=torch.float64) + 1)
    leaves = [t.requires_grad_() for t in (q, k, v, w, beta)]
    return leaves + ([log_f.requires_grad_()] if forget_gate else [None])


def pe_for(forget_gate=False):
    return build_positional_embedding("path", num_heads=H, head_dim=D, hidden_size=H * D,
                                      path_forget_gate=forget_gate).double()


def ours(q, k, v, w, beta, log_f=None, *, impl, window=None, documents=None, block_size=5):
    plan = plan_attention(pe_for(log_f is not None), torch.arange(q.shape[2]),
                          AttentionRun(impl=impl, window=window, block_size=block_size, needs_grad=True, dropout_p=0.0,
                                       dtype=torch.float64, batch=q.shape[0], documents=documents))
    plan = plan.with_layer({"token_terms": log_f, "key_transforms": (w, beta)})
    return plan, plan.attend(q, k, v, 0.0)


def gradients(out, leaves):
    torch.manual_seed(5)
    return torch.autograd.grad((out * torch.randn_like(out)).sum(), [t for t in leaves if t is not None])


@pytest.mark.parametrize("forget_gate", [False, True], ids=["path", "path-fox"])
@pytest.mark.parametrize("layout", ["sequence", "window", "documents"])
@pytest.mark.parametrize("impl", ["sdpa", "blocked", "auto"])
def test_every_path_equals_the_paper_formula(impl, layout, forget_gate):
    window, documents = (4 if layout == "window" else None), (DOCUMENTS if layout == "documents" else None)
    leaves = tensors(forget_gate=forget_gate)
    plan, out = ours(*leaves, impl=impl, window=window, documents=documents)
    assert plan.name == {"sdpa": "sdpa_written_out", "blocked": "blocked", "auto": plan.name}[impl]
    expected = paper_formula(*leaves[:5], log_f=leaves[5], window=window, documents=documents)
    # Attention keeps the forget gate's running sum F in float32 (AttentionPlan.with_layer): its tolerance.
    tight = dict(rtol=1e-6, atol=1e-6) if forget_gate else dict(rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(out, expected, **tight)
    for got, want in zip(gradients(out, leaves), gradients(expected, leaves)):
        torch.testing.assert_close(got, want, **({k: 10 * t for k, t in tight.items()} if forget_gate else
                                                 dict(rtol=1e-9, atol=1e-11)))


@pytest.mark.parametrize("forget_gate", [False, True], ids=["path", "path-fox"])
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
def test_matches_flash_linear_attentions_naive_reference(impl, forget_gate):
    fla_path = naive("path_attn", "naive_path_attn")
    q, k, v, w, beta, log_f = tensors(seed=3, forget_gate=forget_gate)
    _, out = ours(q, k, v, w, beta, log_f, impl=impl)
    # fla's PaTH-FoX scales the gate's sum by 1/sqrt(D) with the dot products (its naive `(A * scale)`, its
    # decoding's do_gate_scale=True); ours adds it unscaled, as FoX does: the same numbers for g * sqrt(D).
    gate = torch.zeros_like(beta) if log_f is None else log_f * math.sqrt(D)
    theirs = fla_path(*(t.transpose(1, 2) for t in (q, k, v, w, beta, gate)), scale=D ** -0.5).transpose(1, 2)
    assert theirs.dtype == torch.float64  # fla computes in float32 and casts back: float32's tolerance
    torch.testing.assert_close(out, theirs, rtol=1e-5, atol=1e-5)
    leaves = [q, k, v, w, beta] + ([log_f] if forget_gate else [])
    for got, want in zip(gradients(out, leaves), gradients(theirs, leaves)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


def matrix_products(q, k, w, beta, q_start):
    """q_i^T (H_i ... H_{j+1}) k_j with each product of D x D matrices multiplied out (j <= i; 0 past i)."""
    n, m, dim = q.shape[2], k.shape[2], q.shape[3]
    eye = torch.eye(dim, dtype=q.dtype)
    householder = eye - beta[..., None, None] * w[..., :, None] * w[..., None, :]  # [b, H, m, D, D]
    scores = q.new_zeros(q.shape[0], q.shape[1], n, m)
    for a in range(n):
        product = eye.expand(q.shape[0], q.shape[1], dim, dim)
        for j in range(q_start + a, -1, -1):
            scores[:, :, a, j] = (q[:, :, a, None, :] @ product @ k[:, :, j, :, None])[..., 0, 0]
            product = product @ householder[:, :, j]
    return scores


@pytest.mark.parametrize("n, m, q_start, chunk", [(40, 40, 0, 7), (13, 70, 57, 16), (25, 100, 40, 32), (9, 9, 0, 32),
                                                  (30, 70, 40, 32)])
def test_the_chunked_dot_products_equal_the_walk_and_the_matrix_products(n, m, q_start, chunk):
    # householder.py's chunks (the strategies') and reference.py's one-key walk (the export's), each against
    # the D x D products multiplied out: several chunks, the last partial; a block of queries starting
    # mid-sequence (blocked's q_start); beta over all of (0, 2) and one run of a repeated w (a repeated
    # token) with beta near 2, the hardest case for the chunks' triangular solve.
    from megatron.model.attention.householder import transformed_dot_products
    from megatron.model.attention.reference import householder_dot_products
    torch.manual_seed(m)
    b, heads, dim = 2, 3, 8
    q, k = (torch.randn(b, heads, n, dim, dtype=torch.float64), torch.randn(b, heads, m, dim, dtype=torch.float64))
    raw = torch.randn(b, heads, m, dim, dtype=torch.float64)
    raw[:, :, 3:12] = raw[:, :, 3:4]
    w = torch.nn.functional.normalize(raw, dim=-1)
    beta = 2 * torch.rand(b, heads, m, dtype=torch.float64)
    beta[:, :, 3:12] = 1.99
    leaves = [t.requires_grad_() for t in (q, k, w, beta)]
    causal = torch.arange(m)[None, :] <= torch.arange(q_start, q_start + n)[:, None]
    chunked = transformed_dot_products(q, k, w, beta, q_start, chunk).masked_fill(~causal, 0)
    expected = matrix_products(q, k, w, beta, q_start)
    torch.testing.assert_close(chunked, expected, rtol=1e-10, atol=1e-11)
    probe = torch.randn_like(chunked)
    for got, want in zip(torch.autograd.grad((chunked * probe).sum(), leaves),
                         torch.autograd.grad((expected * probe).sum(), leaves)):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-10)
    if q_start + n == m:  # reference.py takes the last n positions' queries
        walked = householder_dot_products(q, k, w, beta).masked_fill(~causal, 0)
        torch.testing.assert_close(walked, expected, rtol=1e-10, atol=1e-11)


def test_the_method_makes_unit_w_and_beta_in_0_2_from_the_layer_input():
    pe = pe_for(forget_gate=True)
    x = torch.randn(2, L, H * D, dtype=torch.float64)
    w, beta = pe.key_transforms(x)
    assert w.shape == (2, H, L, D) and beta.shape == (2, H, L)
    torch.testing.assert_close(w.norm(dim=-1), torch.ones(2, H, L, dtype=torch.float64))
    expected = pe.w_weight.detach() @ x[0, 3]  # token 3 of row 0, head 1: W_w x normalised
    torch.testing.assert_close(w[0, 1, 3], expected[D:] / expected[D:].norm())
    torch.testing.assert_close(beta[0, 1, 3], 2 * torch.sigmoid(pe.beta_weight[1] @ x[0, 3] + pe.beta_bias[1]))
    g = pe.token_terms(x)
    gate = torch.nn.functional.logsigmoid(pe.gate_weight[1] @ x[0, 3] + pe.gate_bias[1])
    torch.testing.assert_close(g[0, 1, 3], gate)
    assert pe_for().token_terms(x) is None and not ("token_terms" in pe_for().channels)


def test_the_planner_runs_it_only_where_the_scores_are_written_out():
    for forget_gate in (False, True):
        pe = pe_for(forget_gate)
        inputs = AttentionInputs.describe(pe, torch.arange(512), None, None, window=None, block_size=128,
                                          needs_grad=True, dropout_p=0.0, dtype=torch.float32, batch=2)
        assert inputs.has("key_transforms") and inputs.has_terms
        assert sorted(n for n, s in STRATEGIES.items() if s.can_run(inputs) is None) == ["blocked", "sdpa_written_out"]
        for name in ("sdpa", "flex", "toeplitz"):
            assert STRATEGIES[name].can_run(inputs) is not None  # the first need it lacks (needs.py's order)
            if not forget_gate:
                assert "Householder transforms of the keys" in STRATEGIES[name].can_run(inputs)
        assert choose_strategy("auto", inputs, 2**30).name == "blocked"


@pytest.mark.parametrize("overrides", [{}, {"attention_window": 5}, {"path_forget_gate": True}],
                         ids=["path", "window", "forget-gate"])
def test_cached_generation_equals_a_full_forward(overrides):
    assert_cache_matches_full_forward(tiny_model("path", **overrides), PROMPTS, 20)


def test_every_layer_has_its_own_transforms_and_they_learn():
    model = tiny_model("path", num_layers=3, attention_impl="auto", path_forget_gate=True)
    assert len(model.pos_embs) == 3 and model.layer_module == [0, 1, 2]
    model.train()
    model(torch.randint(0, 258, (2, 20))).square().mean().backward()
    for name in ("w_weight", "beta_weight", "gate_weight"):
        grads = [getattr(pe, name).grad for pe in model.pos_embs]
        assert all(g is not None and g.abs().sum() > 0 for g in grads), name


def test_a_temperature_on_top_is_refused():
    with pytest.raises(PositionalEmbeddingError,
                       match="pos-emb 'path' has Householder transforms of the keys by the tokens between"):
        tempered(pe_for(), {"type": "ssmax"})


def test_dry_run_plans_show_the_blocked_strategy():
    args = NeoXArgs.from_dict({"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq_length": 64,
                               "train_micro_batch_size_per_gpu": 1, "pos_emb": "path", "path_forget_gate": True,
                               "tokenizer_type": "ByteLevelTokenizer"})
    assert "blocked" in training_plans(model_config(args, None), args.seq_length, 1, False)[0]


def test_a_checkpoint_records_the_option_that_changes_the_attention():
    from megatron.model.positional_embeddings import checkpoint_options
    # a checkpoint loaded with the other value is refused
    assert checkpoint_options("path") == ("path_forget_gate",)


def test_results_and_tables_never_share_the_plain_paths_row():
    # The gate changes what `path` stands for: a run trained with it is named so in its result file's identity
    # and in the tables' column labels (as p-RoPE is for rotary), read from the config its checkpoint stores.
    from megatron.evaluation.identity import evaluation_variant
    from megatron.evaluation.labels import trained_parts
    base = {"train-micro-batch-size-per-gpu": 1, "pos-emb": "path"}
    plain, gated = NeoXArgs.from_dict(base), NeoXArgs.from_dict({**base, "path-forget-gate": True})
    assert evaluation_variant(plain) is None and trained_parts(plain) == []
    assert evaluation_variant(gated) == "forget-gate" and trained_parts(gated) == ["forget-gate"]
    stored = gated.to_dict()  # what train.py keeps in the checkpoint
    assert trained_parts(stored) == ["forget-gate"]
