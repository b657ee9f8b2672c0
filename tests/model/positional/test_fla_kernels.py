"""The `fla` strategy (megatron/model/attention/fla_kernels.py): flash-linear-attention's Triton kernels for
per-token terms (fox, cable), stick-breaking and PaTH's key transforms, on CUDA only.

On CPU: `auto` never takes it and naming it is refused in one paragraph (as is naming it, or `auto` passing
it over, where fla is missing); its tensor plumbing (fla's [B, L, H, D] layout, packed documents flattened
with `cu_seqlens`, PaTH's gate times sqrt(D), the gate and transform tensors handed on with their autograd
graph) runs with fla's own plain-torch references (fla/ops/<op>/naive.py, fla-core 0.6.0, loaded by path)
in place of the Triton kernels, against this project's own `blocked` path in float64, forward and gradients
(q, k, v, the layer input and every parameter of the method). On CUDA (`cuda`-marked, `make gpu-check`):
the real kernels against this project's own path."""
import warnings

import pytest
import torch
from tests.model.positional.fla_naive import naive

from megatron.errors import NeoXArgsError
from megatron.model.attention import AttentionInputs, AttentionRun, plan_attention
from megatron.model.attention import fla_kernels
from megatron.model.attention.choice import choose_strategy
from megatron.model.attention.fla_kernels import FlaKernels, cu_seqlens_of
from megatron.model.positional_embeddings import build_positional_embedding

H, D, L, HIDDEN = 2, 16, 24, 32
# name -> (pos-emb, its options)
METHODS = {"fox": ("fox", {}), "cable": ("cable", {}), "stickbreaking": ("stickbreaking", {}),
           "stickbreaking-current": ("stickbreaking", {"stickbreaking_attend_current": True}),
           "path": ("path", {}), "path-fox": ("path", {"path_forget_gate": True})}
DOCUMENTS = torch.tensor([[0] * 9 + [1] * 10 + [2] * 5, [0] * 1 + [1] * 23])  # a one-token document too


def pe_for(method, dtype=torch.float64, heads=H, dim=D):
    name, options = METHODS[method]
    torch.manual_seed(1)
    pe = build_positional_embedding(name, num_heads=heads, head_dim=dim, hidden_size=heads * dim, **options)
    with torch.no_grad():  # away from the initial values, so a gate or beta mix-up would show
        for parameter in pe.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return pe.to(dtype)


def described(pe, *, device="cpu", dtype=torch.bfloat16, documents=False, needs_grad=True, window=None, dropout_p=0.0):
    inputs = AttentionInputs.describe(pe, torch.arange(L), None, None, window=window, block_size=8,
                                      needs_grad=needs_grad, dropout_p=dropout_p, dtype=dtype, batch=2,
                                      documents=documents)
    return inputs.with_run(device_type=device)


@pytest.mark.parametrize("method", sorted(METHODS))
def test_auto_never_takes_fla_on_cpu_and_it_says_why(method):
    pe = pe_for(method, torch.float32)
    for dtype in (torch.bfloat16, torch.float32):
        for documents in (False, True):
            for needs_grad in (False, True):
                inputs = described(pe, dtype=dtype, documents=documents, needs_grad=needs_grad)
                with warnings.catch_warnings():
                    warnings.simplefilter("error")  # nor a word about fla on a CPU
                    assert choose_strategy("auto", inputs, 2**30).name != "fla"
                assert FlaKernels.can_run(inputs).startswith("fla's Triton kernels need CUDA, and this forward runs "
                                                             "on cpu.")


def test_naming_fla_without_cuda_is_one_paragraph_from_the_model():
    from tests.support.generation import tiny_model
    model = tiny_model("fox", attention_impl="fla")
    with pytest.raises(NeoXArgsError, match=r"^attention-impl is 'fla', but fla's Triton kernels need CUDA, and this "
                                            r"forward runs on cpu\. Set attention-impl to 'auto' \(on CUDA it takes "
                                            r"fla's kernels where they apply\) or run on a CUDA device\.$"):
        model(torch.randint(0, 258, (1, 8)))


def test_what_the_kernels_cannot_compute_is_refused_on_cuda_too():
    fox, path = pe_for("fox", torch.float32), pe_for("path", torch.float32)
    reasons = {
        "alibi": FlaKernels.can_run(described(build_positional_embedding("alibi", num_heads=H, head_dim=D),
                                              device="cuda")),
        "window": FlaKernels.can_run(described(fox, device="cuda", window=8)),
        "dropout": FlaKernels.can_run(described(fox, device="cuda", dropout_p=0.1)),
        "float32": FlaKernels.can_run(described(fox, device="cuda", dtype=torch.float32)),
        "path head dim": FlaKernels.can_run(described(path, device="cuda").with_run(head_dim=48)),
        "fox head dim": FlaKernels.can_run(described(fox, device="cuda").with_run(head_dim=512)),
    }
    assert reasons["alibi"].startswith("the `fla` strategy runs only with per-token terms (fox, cable), stick-breaking")
    assert reasons["window"] == "fla's Triton kernels do not handle an attention window. Set attention-impl to 'auto'"
    assert reasons["dropout"] == "fla's Triton kernels do not handle attention dropout. Set attention-impl to 'auto'"
    assert "take bf16 or fp16" in reasons["float32"] and "32-bit floats" in reasons["float32"]
    assert "head dimensions 16, 32, 64, 128, and this model's is 48" in reasons["path head dim"]
    assert "head dimensions up to 256, and this model's is 512" in reasons["fox head dim"]


@pytest.fixture
def fla_missing(monkeypatch):
    """fla absent: find_spec finds no `fla` (fla_problem asks it, and is asked again after this test)."""
    find_spec = fla_kernels.importlib.util.find_spec
    monkeypatch.setattr(fla_kernels.importlib.util, "find_spec",
                        lambda name, *rest: None if name == "fla" else find_spec(name, *rest))
    fla_kernels.fla_problem.cache_clear()
    yield
    fla_kernels.fla_problem.cache_clear()


def test_a_missing_fla_on_cuda_is_one_paragraph_and_auto_says_what_it_takes_instead(fla_missing):
    """Naming it is refused with what to install; `auto` takes this project's own path and says, once, that
    fla's kernels would have computed the forward."""
    inputs = described(pe_for("fox", torch.float32), device="cuda")
    with pytest.raises(NeoXArgsError, match=r"^attention-impl is 'fla', but fla-core is not installed here; "
                                            r"`pip install fla-core==0\.6\.0` installs it\. Or set attention-impl "
                                            r"to 'auto', which then uses this project's own attention paths\.$"):
        choose_strategy("fla", inputs, 2**30)
    with pytest.warns(UserWarning, match=r"^attention-impl 'auto' would compute this forward with the 'fla' "
                                         r"strategy, but fla-core is not installed here; `pip install "
                                         r"fla-core==0\.6\.0` installs it; it takes 'sdpa' instead\.$"):
        assert choose_strategy("auto", inputs, 2**30).name == "sdpa"


@pytest.mark.parametrize("pos_emb", ["fox", "path", "alibi"])
def test_the_dry_run_says_what_auto_takes_on_cuda(pos_emb, fla_missing):
    """`--dry-run` plans on the CPU; its line for a method fla's kernels compute says what CUDA would take."""
    from megatron.model.layer_pattern import training_plans
    from megatron.neox_arguments import NeoXArgs
    from megatron.neox_arguments.to_model import model_config
    args = NeoXArgs.from_dict({"num_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "seq_length": 64,
                               "train_micro_batch_size_per_gpu": 1, "pos_emb": pos_emb,
                               "tokenizer_type": "ByteLevelTokenizer"})
    [line] = training_plans(model_config(args, None), args.seq_length, 1, True)
    cuda = ("; on CUDA in bf16/fp16 `auto` would take 'fla', but fla-core is not installed here; "
            "`pip install fla-core==0.6.0` installs it")
    assert line.endswith(cuda) == (pos_emb != "alibi") and "on CUDA" not in line.removesuffix(cuda), line


def test_packed_documents_become_fla_cu_seqlens_of_the_flattened_batch():
    documents = torch.tensor([[0, 0, 0, 1, 1], [0, 1, 1, 1, 2]])
    assert cu_seqlens_of(documents).tolist() == [0, 3, 5, 6, 9, 10]
    assert cu_seqlens_of(torch.tensor([[4, 4], [4, 4]])).tolist() == [0, 2, 4]  # rows never share a document


def varlen(function, outputs: int):
    """fla's calling convention around a naive.py function, which has no `cu_seqlens`: each document of the
    flattened row attended alone (fla's variable-length form), after checking what fla's kernels require."""
    def run(*tensors, scale, cu_seqlens=None, **options):
        for t in tensors:
            assert t is None or t.is_contiguous() and t.shape[:3] == tensors[0].shape[:3], "fla's [B, L, H, ...]"
        if cu_seqlens is None:
            return function(*tensors, scale=scale, **options)
        assert tensors[0].shape[0] == 1, "fla takes packed documents as one flattened row"
        pieces = [function(*(None if t is None else t[:, start:end] for t in tensors), scale=scale, **options)
                  for start, end in zip(cu_seqlens[:-1].tolist(), cu_seqlens[1:].tolist())]
        if outputs == 1:
            return torch.cat(pieces, dim=1)
        return tuple(None if parts[0] is None else torch.cat(parts, dim=1) for parts in zip(*pieces))
    return run


def naive_kernels():
    """fla's naive.py functions, called as fla_kernels calls the Triton ones."""
    fox, stick, path = (naive("forgetting_attn", "naive_forgetting_attn"),
                        naive("stickbreaking_attn", "naive_stickbreaking_attn"), naive("path_attn", "naive_path_attn"))

    def path_kernel(q, k, v, w, beta, g, scale):  # naive.py takes a gate always and returns the output alone
        return path(q, k, v, w, beta, torch.zeros_like(beta) if g is None else g, scale=scale), None

    return {"forgetting_attn": varlen(fox, 1), "stickbreaking_attn": varlen(stick, 2),
            "path_attn": varlen(path_kernel, 2)}


def attend_layer(plan, pe, q, k, v, x):
    """One layer's attention as transformer.py runs it: the plan given this layer's terms from x."""
    plan = plan.with_layer(pe.layer_values(x))
    q, k = plan.rotate(q, k)
    return plan.attend(q, k, v, 0.0)


def forward_and_gradients(plan, pe, leaves):
    out = attend_layer(plan, pe, *leaves)
    torch.manual_seed(7)
    reads_x = ("token_terms" in pe.channels) or ("key_transforms" in pe.channels)  # stick-breaking reads q, k and v alone
    wrt = list(leaves if reads_x else leaves[:3]) + list(pe.parameters())
    weights = torch.randn(out.shape, dtype=out.dtype, device=out.device)  # not randn_like: it follows out's strides
    return out, torch.autograd.grad((out * weights).sum(), wrt)


@pytest.mark.parametrize("layout", ["batch", "documents"])
@pytest.mark.parametrize("method", sorted(METHODS))
def test_the_plumbing_with_flas_naive_references_equals_the_blocked_path(method, layout, monkeypatch):
    kernels = naive_kernels()
    monkeypatch.setattr(fla_kernels, "kernel", lambda op: kernels[op])
    documents = DOCUMENTS if layout == "documents" else None
    pe = pe_for(method)
    torch.manual_seed(0)
    leaves = [torch.randn(2, H, L, D, dtype=torch.float64, requires_grad=True) for _ in range(3)]
    leaves.append(torch.randn(2, L, HIDDEN, dtype=torch.float64, requires_grad=True))  # the layer input x
    positions = torch.arange(L)
    fla_plan = FlaKernels(pe, positions, window=None, block_size=8, span=L, dtype=torch.float64, bias_table=None,
                          weight_table=None, documents=documents)
    ours_plan = plan_attention(pe, positions, AttentionRun(impl="blocked", window=None, block_size=8, needs_grad=True,
                                                           dropout_p=0.0, dtype=torch.float64, batch=2,
                                                           documents=documents))
    got, got_grads = forward_and_gradients(fla_plan, pe, leaves)
    want, want_grads = forward_and_gradients(ours_plan, pe, leaves)
    assert got.dtype == torch.float64 and len(got_grads) == len(want_grads) >= 3 + len(list(pe.parameters()))
    # fla's naive stick-breaking computes in float64; its forgetting and PaTH references in float32.
    tight = METHODS[method][0] == "stickbreaking"
    torch.testing.assert_close(got, want, **(dict(rtol=1e-10, atol=1e-12) if tight else dict(rtol=1e-5, atol=1e-5)))
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        torch.testing.assert_close(g, w, **(dict(rtol=1e-9, atol=1e-11) if tight else dict(rtol=1e-4, atol=1e-5)),
                                   msg=lambda m: f"gradient {i}: {m}")
        assert w.abs().max() > 0, f"gradient {i} is zero: the test would not see a wrong one"


# --- On CUDA: the real kernels (make gpu-check) -------------------------------------------------------------

CUDA_H, CUDA_D, CUDA_L = 4, 64, 384


def cuda_case(method, documents: bool):
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if (problem := fla_kernels.fla_problem()) is not None:
        pytest.skip(problem)
    pe = pe_for(method, torch.float32, heads=CUDA_H, dim=CUDA_D).cuda()
    generator = torch.Generator().manual_seed(0)
    draw = lambda *shape: torch.randn(*shape, generator=generator).cuda()  # noqa: E731
    leaves = [draw(2, CUDA_H, CUDA_L, CUDA_D) for _ in range(3)] + [draw(2, CUDA_L, CUDA_H * CUDA_D)]
    docs = None
    if documents:  # documents of 100, 7, 1 and the rest tokens in row 0; one document in row 1
        docs = torch.zeros(2, CUDA_L, dtype=torch.long)
        docs[0, 100:], docs[0, 107:], docs[0, 108:] = 1, 2, 3
        docs = docs.cuda()
    return pe, leaves, docs


def run_cuda(pe, leaves, docs, *, impl, dtype):
    leaves = [t.to(dtype).requires_grad_() for t in leaves]
    pe.zero_grad(set_to_none=True)
    plan = plan_attention(pe, torch.arange(CUDA_L, device="cuda"), AttentionRun(impl=impl, window=None, block_size=128,
                                                                                needs_grad=True, dropout_p=0.0,
                                                                                dtype=dtype, batch=2, documents=docs))
    out, grads = forward_and_gradients(plan, pe, leaves)
    return plan.name, out.float(), [g.float() for g in grads]


def relative(got, want):
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-30))


@pytest.mark.cuda
@pytest.mark.parametrize("documents", [False, True], ids=["batch", "documents"])
@pytest.mark.parametrize("method", ["fox", "cable", "stickbreaking", "stickbreaking-current", "path", "path-fox"])
def test_on_cuda_auto_takes_fla_and_it_agrees_with_this_projects_path(method, documents):
    """bf16: fla's kernels (taken by `auto`) and this project's own path, each against this project's path in
    float32, forward and every gradient (q, k, v, the layer input, the method's parameters). bf16 keeps 8 bits
    (2^-8 = 4e-3 relative per element) and fla's kernels round the weights to bf16 before P.V where this
    project's written-out paths keep float32: fla's error may be 4x this project's own bf16 error plus 1e-2
    (both were about 5e-3 on an H200, tools/gpu_check/fla_kernels.py); a wrong convention errs by order 1."""
    pe, leaves, docs = cuda_case(method, documents)
    _, reference, reference_grads = run_cuda(pe, leaves, docs, impl="blocked", dtype=torch.float32)
    name, fla_out, fla_grads = run_cuda(pe, leaves, docs, impl="auto", dtype=torch.bfloat16)
    assert name == "fla"
    ours_name, ours_out, ours_grads = run_cuda(pe, leaves, docs, impl="blocked", dtype=torch.bfloat16)
    for label, got, ours, want in [("out", fla_out, ours_out, reference)] + [
            (f"gradient {i}", g, o, w) for i, (g, o, w) in enumerate(zip(fla_grads, ours_grads, reference_grads))]:
        error, own = relative(got, want), relative(ours, want)
        assert error <= 4 * own + 1e-2, f"{label}: fla {error:.2e}, this project's bf16 ({ours_name}) {own:.2e}"


@pytest.mark.cuda
def test_on_cuda_a_fox_model_trains_through_fla_in_bf16(monkeypatch):
    """The model's own forward under bf16 autocast takes fla's kernels (auto) and gives the loss and the gate's
    gradient that the `sdpa` path gives."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    if (problem := fla_kernels.fla_problem()) is not None:
        pytest.skip(problem)
    from tests.support.generation import tiny_model
    tokens = torch.randint(0, 258, (2, 64), generator=torch.Generator().manual_seed(0)).cuda()
    calls, real_kernel = [], fla_kernels.kernel
    monkeypatch.setattr(fla_kernels, "kernel", lambda op: calls.append(op) or real_kernel(op))  # counts, then runs it
    results = {}
    for impl in ("auto", "sdpa"):
        model = tiny_model("fox", attention_impl=impl, num_attention_heads=2).cuda().train()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(tokens).float().square().mean()
        loss.backward()
        results[impl] = loss.item(), model.pos_embs[0].gate_weight.grad.float()
        if impl == "auto":
            assert calls and set(calls) == {"forgetting_attn"}, calls  # auto took fla's kernel, in every layer
    (auto_loss, auto_grad), (sdpa_loss, sdpa_grad) = results["auto"], results["sdpa"]
    assert auto_loss == pytest.approx(sdpa_loss, rel=2e-2)
    assert relative(auto_grad, sdpa_grad) < 5e-2
