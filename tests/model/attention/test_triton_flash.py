"""The `triton` path's flash kernel (megatron/model/attention/triton_kernel.py) in Triton's interpreter on CPU.

The every-strategy harness (test_strategies.py) ties it to reference.py in float64 for every method and layout;
here: float32 against a float64 formula written out below, over several tiles (ragged last tile, a window that
spans a few block diagonals, packed documents, a head dimension the kernel pads), the model with the kernel
against the model on `sdpa`, and what the strategy refuses, estimates and what `auto` takes."""
import math
import sys
import types

import pytest
import torch

from megatron.model import GPTModel
from megatron.model.attention import AttentionInputs
from megatron.model.attention.choice import choose_strategy
from megatron.model.attention.registry import STRATEGIES
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.neox_arguments.to_model import model_config


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    """Triton's interpreter, read when the kernel module is first imported (and by the strategy's can_run); where
    triton was imported without it (a CUDA machine: tests/conftest.py imports it under the interpreter only
    without CUDA), these CPU tests cannot run the kernel and say so."""
    from megatron.model.attention.triton_flash import interpreter_problem
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    if (problem := interpreter_problem()) is not None:
        pytest.skip(f"Triton's interpreter is not available in this process: {problem}")


def float64_formula(q, k, v, bias, weight, documents, window):
    """softmax_j((q_i . k_j / sqrt(D)) * weight[h, i - j] + bias[h, i - j]) v_j over j <= i, i - j < window,
    same document: everything [b, H, L, L], in float64."""
    length = q.shape[2]
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    distance = (i - j).clamp(min=0)
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(q.shape[-1])
    if weight is not None:
        scores = scores * weight.double()[:, distance]
    if bias is not None:
        scores = scores + bias.double()[:, distance]
    visible = (j <= i) & ((i - j < window) if window else True)
    visible = visible[None, None]
    if documents is not None:
        visible = visible & (documents[:, None, :, None] == documents[:, None, None, :])
    return scores.masked_fill(~visible, float("-inf")).softmax(-1) @ v.double()


@pytest.mark.parametrize("window, with_documents, with_weight", [(18, False, True), (None, True, False)],
                         ids=["window-weight", "documents"])
def test_the_kernel_matches_the_float64_formula_in_float32(window, with_documents, with_weight):
    """56 tokens: three full 16-row tiles and a ragged one (the interpreter's tile), 24 dims (padded to 32);
    a window of 18 reaches three block diagonals of the four."""
    from megatron.model.attention.triton_kernel import flash_attention_with_distance_tables
    torch.manual_seed(0)
    batch, heads, length, dim = 1 + with_documents, 2, 56, 24
    q, k, v = (torch.randn(batch, heads, length, dim, requires_grad=True) for _ in range(3))
    bias = torch.randn(heads, length, requires_grad=True)
    weight = (0.5 + torch.rand(heads, length)).requires_grad_() if with_weight else None
    documents = torch.tensor([[0] * 30 + [1] * 26, [0] * 5 + [1] * 36 + [2] * 15]) if with_documents else None
    probe = torch.randn(batch, heads, length, dim, dtype=torch.float64)
    leaves = [q, k, v, bias] + ([weight] if with_weight else [])

    out = flash_attention_with_distance_tables(q, k, v, bias, weight, documents, window)
    got = torch.autograd.grad((out.double() * probe).sum(), leaves)
    expected_out = float64_formula(q, k, v, bias, weight, documents, window)
    expected = torch.autograd.grad((expected_out * probe).sum(), leaves)

    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), expected_out, atol=1e-5, rtol=1e-5)
    for name, g, e in zip(("q", "k", "v", "bias", "weight"), got, expected):
        torch.testing.assert_close(g.double(), e.double(), atol=1e-5, rtol=1e-4, msg=lambda m: f"gradient of {name}: {m}")


def make_model(impl: str, **overrides):
    args = NeoXArgs.from_dict({"num_layers": 2, "hidden_size": 32, "num_attention_heads": 2, "seq_length": 40,
                               "train_micro_batch_size_per_gpu": 2, "pos_emb": "kerple_log", "attention_window": 23,
                               "attention_impl": impl} | overrides)
    torch.manual_seed(0)
    model = GPTModel(model_config(args, 64))
    with torch.no_grad():  # kernel parameters off their initial values
        for pe in model.positional_embeddings():
            for p in pe.parameters():
                p.add_(0.3 * torch.rand_like(p))
    return model


def test_a_model_on_the_kernel_trains_as_on_sdpa():
    """attention-impl: triton through GPTModel (two layers, heads of 16, a window): the logits and every
    parameter's gradient, KERPLE's included, as on `sdpa` (its table gradient on the side)."""
    ids = torch.randint(0, 64, (2, 40), generator=torch.Generator().manual_seed(1))
    results = {}
    for impl in ("sdpa", "triton"):
        model = make_model(impl)
        logits = model(ids)
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids.roll(-1, 1).flatten()).backward()
        results[impl] = logits.detach(), {n: p.grad for n, p in model.named_parameters()}
    torch.testing.assert_close(results["triton"][0], results["sdpa"][0], atol=1e-5, rtol=1e-5)
    assert results["sdpa"][1]["pos_embs.0.raw_r1"].abs().min() > 0  # KERPLE's parameters learn on both
    for name, expected in results["sdpa"][1].items():
        torch.testing.assert_close(results["triton"][1][name], expected, atol=1e-6, rtol=1e-4, msg=name)


def described(method="kerple_log", device="cuda", needs_grad=True, dropout=0.0, length=256, dtype=torch.float32,
              positions=None):
    pe = build_positional_embedding(method, num_heads=4, head_dim=16, hidden_size=64)
    positions = torch.arange(length) if positions is None else positions
    with torch.set_grad_enabled(needs_grad):
        tables = pe.distance_tables_at(positions, int(positions.max()) + 1) or (None, None)
    inputs = AttentionInputs.describe(pe, positions, *tables, window=None, block_size=64, needs_grad=needs_grad,
                                      dropout_p=dropout, dtype=dtype, batch=2)
    return inputs.with_run(device_type=device)


def refusal(inputs):
    with pytest.raises(NeoXArgsError) as raised:
        choose_strategy("triton", inputs, 2**62)
    return str(raised.value)


def test_it_refuses_what_it_cannot_compute_in_one_paragraph(monkeypatch):
    assert refusal(described(dropout=0.1)) == (
        "attention-impl is 'triton', but the Triton kernel does not apply attention dropout (attention-dropout 0.1). "
        "Set attention-impl to 'auto', 'sdpa' or 'blocked'.")
    assert "depend on the query position itself" in refusal(described("fire", length=4096))
    assert "not consecutive" in refusal(described(positions=torch.arange(0, 512, 2)))
    assert "per-token terms" in refusal(described("fox"))
    assert "no bf16 or fp16 arithmetic" in refusal(described(device="cpu", dtype=torch.bfloat16))
    assert "runs on CUDA devices, and this forward runs on mps" in refusal(described(device="mps"))
    monkeypatch.delenv("TRITON_INTERPRET")
    assert refusal(described(device="cpu")) == (
        "attention-impl is 'triton', but Triton compiles its kernels for GPUs, and this forward runs on the CPU, "
        "where only Triton's interpreter runs them (slowly: for tests). Set attention-impl to 'auto' or 'blocked', "
        "run on a CUDA device, or set TRITON_INTERPRET=1 before starting to run the kernel in the interpreter.")
    assert choose_strategy("triton", described(device="cuda"), 0).name == "triton"  # no L x L: no budget
    # The variable set after triton was imported without it (its library made for compiling): said, not run.
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setitem(sys.modules, "triton.language", types.SimpleNamespace(zeros=object()))
    assert ("runs them (slowly: for tests) (TRITON_INTERPRET is set, but triton was imported in this process before "
            "it was (torch's compiler imports it too), and Triton reads it only then). Set attention-impl to") \
        in refusal(described(device="cpu"))


def test_its_memory_is_linear_in_the_length():
    for needs_grad in (False, True):
        short = described(needs_grad=needs_grad)
        long = short.with_run(length=4 * short.run.length)
        assert STRATEGIES["triton"].memory_bytes(long) == 4 * STRATEGIES["triton"].memory_bytes(short)
        assert not STRATEGIES["triton"].quadratic_memory


def test_auto_takes_it_on_cuda_to_train_a_learnable_distance_table():
    assert choose_strategy("auto", described("kerple_log"), 2**62).name == "triton"
    assert choose_strategy("auto", described("t5"), 2**62).name == "triton"
    assert choose_strategy("auto", described("kerple_log", needs_grad=False), 2**62).name == "sdpa"  # evaluation
    assert choose_strategy("auto", described("alibi"), 2**62).name == "sdpa"  # a fixed table: nothing to learn
    assert choose_strategy("auto", described("kerple_log", dropout=0.1), 2**62).name == "sdpa"  # it refuses dropout
    assert choose_strategy("auto", described("kerple_log", device="cpu"), 2**62).name == "toeplitz_table_gradient"


def test_sdpa_mask_gradient_counts_the_mask_gradient_on_cuda():
    """sdpa_mask_gradient: on CUDA no written-out scores, the mask's gradient [b, H, L, L] and its batch sum
    instead (e each); the path takes `sdpa`'s own strategies where there is no learnable table."""
    inputs = described("kerple_log")
    e, heads, batch, length = 4, 4, 2, 256
    assert STRATEGIES["sdpa_mask_gradient"].memory_bytes(inputs) == length ** 2 * e * heads * (1 + batch + 1)
    assert choose_strategy("sdpa_mask_gradient", inputs, 0).name == "sdpa_mask_gradient"
    assert choose_strategy("sdpa_mask_gradient", described("alibi"), 0).name == "sdpa"


def test_kernels_loaded_for_the_other_device_say_so(monkeypatch):
    """Triton reads TRITON_INTERPRET once, when the kernels are made: CPU tensors given to compiled kernels (the
    variable set too late) stop with what to do, not Triton's own pointer error."""
    from megatron.model.attention import triton_kernel
    assert triton_kernel.interpreted()  # this process's kernels: made under the fixture's interpreter
    monkeypatch.setattr(triton_kernel, "interpreted", lambda: False)
    q = torch.randn(1, 1, 16, 16)
    with pytest.raises(RuntimeError, match=r"^the Triton attention kernel was loaded without Triton's interpreter "
                       r"\(TRITON_INTERPRET off when it was first imported in this process\), and this forward's "
                       r"tensors are on cpu: .* Start a new process with TRITON_INTERPRET=1 for the CPU"):
        triton_kernel.flash_attention_with_distance_tables(q, q, q)
