"""`make gpu-check` and what it runs on a GPU.

On any machine, in-process: a CPU check runs only as a tiny smoke run, a budget names a part and its seconds,
the committed GPU reports' verdicts say why, the two-rank test runs whenever there are two GPUs, the training
part builds what its ratios need first and goes on past a configuration that fails, the evaluation section
compares the kernel with the materialised bias, and the wheel list is the requirements' closure minus the GPU
image. What starts the check or the sweep (its refusal without CUDA, its parts end to end at toy sizes, the
gpu-mini sweep through deepy.py): tests/e2e/tools/test_gpu_check.py.

On CUDA (`cuda`-marked, run by `make gpu-check`): every attention path x every method, forward and
gradients (kernel parameters included) in fp32 and bf16 against a float64 materialised reference; the
whole model on CUDA against the same model on the CPU; a bf16 DeepSpeed step on CUDA through FlexAttention.
"""
import copy
import json
import math

import pytest
import torch

from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.model.attention import AttentionRun, attend, plan_attention
from megatron.model.attention.written_out import WRITTEN_OUT
from megatron.model.positional_embeddings import available, build_positional_embedding
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from tests.support.training import REPO_ROOT, tiny_args

METHODS = available()
CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cpu_runs_only_as_a_tiny_smoke_run(capsys):
    from tools.gpu_check.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu"])
    assert exit_info.value.code == 2
    assert "--device cpu runs only with --tiny" in capsys.readouterr().err


@pytest.mark.parametrize("given", ["flx=30", "fla=soon", "fla"])
def test_a_budget_for_no_part_or_without_seconds_is_refused(given, capsys):
    from tools.gpu_check.cli import main
    with pytest.raises(SystemExit) as exit_info:
        main(["--device", "cpu", "--tiny", "--budget", given])
    assert exit_info.value.code == 2
    assert f"--budget {given!r}: expected PART=SECONDS with PART one of install, environment, tests," \
        in capsys.readouterr().err


@pytest.mark.parametrize("folder, verdict", [
    ("docs/gpu/report.json", "**Verdict: FAILED**: the tests part stopped at its time limit, 22 test(s) failed."),
    ("docs/gpu/fla-eval/report.json", "**Verdict: FAILED**: the tests part stopped at its time limit."),
    ("docs/gpu/all-tests/report.json", "**Verdict: passed** (every test run passed and every part finished).")])
def test_the_verdict_says_why_a_gpu_run_did_not_pass(folder, verdict):
    """The committed H200 runs' report.json, as the GPU machine wrote them, rendered again."""
    from tools.gpu_check import report
    rendered = report.render(json.loads((REPO_ROOT / folder).read_text())).splitlines()
    assert verdict in rendered


def test_the_guides_multi_gpu_command_runs_whenever_there_are_two_gpus():
    """The two-rank launch test (the GPU guide's multi-GPU command) is deselected on one GPU, and with two or
    more it runs even when the check was asked for other test files; the report says which happened."""
    from tools.gpu_check import report, tests_part
    two = tests_part.TWO_RANK_TEST
    one_gpu = tests_part.command(False, 1, ("tests/tools/test_gpu_check.py",))
    assert one_gpu[one_gpu.index("--deselect") + 1] == two and one_gpu[-1] == "tests/tools/test_gpu_check.py"
    assert tests_part.command(False, 2, ("tests/tools/test_gpu_check.py",))[-2:] == ["tests/tools/test_gpu_check.py", two]
    assert "--deselect" not in tests_part.command(False, 2, ("tests/tools/test_gpu_check.py",))
    assert tests_part.command(False, 4, tests_part.FILES).count(two) == 0  # its file runs whole
    assert tests_part.two_ranks(False, 1, {})["outcome"] == "not run: it needs two GPUs and this machine has 1"
    assert tests_part.two_ranks(False, 2, {two: "PASSED"})["outcome"] == "passed"
    assert tests_part.two_ranks(False, 2, {})["outcome"] == "not reached"  # stopped at the part's limit first
    tests = {"command": "pytest", "seconds": 1, "budget_s": 260, "timed_out": False, "summary": "1 failed",
             "exit_code": 1, "deselected": [], "failed": [two], "reasons": {}, "log": "tests.log",
             "two_ranks": tests_part.two_ranks(False, 2, {two: "FAILED"})}
    assert f"Two GPUs, the GPU guide's multi-GPU command (`{two}`): failed" in "\n".join(report._tests(tests))
    assert not report.passed({"tests": tests})



def test_the_training_part_builds_what_its_ratios_need_before_what_compiles():
    """Building stops at half the part's budget: on CUDA every method at `auto`, the peer, the three training
    paths of a learnable distance table (`triton`, SDPA with the side pass, `sdpa_mask_gradient`) and the old
    step come before the configurations that compile (`flex`, the compiled layers) and the gpu-mini model."""
    from tools.gpu_check.profiles import LEARNABLE_TABLE_METHODS, TABLE4_METHODS
    from tools.gpu_check.train_speed import PEER, configurations
    labels = [c["label"] for c in configurations("162M", "cuda", TABLE4_METHODS)]
    assert len(labels) == len(set(labels))
    needed = [*TABLE4_METHODS, PEER, "alibi+triton", "none+old-step", "rotary+old-step", "kerple_log+old-step",
              "none@8192", "kerple_log@8192", "t5@8192"] + [
        f"{m}+{impl}" for m in LEARNABLE_TABLE_METHODS for impl in ("triton", "sdpa", "sdpa_mask_gradient")]
    compiling = [i for i, label in enumerate(labels) if label.endswith(("+flex", "+compiled")) or "/" in label]
    assert compiling and labels[-1] == "gpu-mini/kerple_log"
    assert max(labels.index(label) for label in needed) < min(compiling), labels
    # On the CPU there is no `flex` and no side-pass row: `auto` is the blocked path there.
    on_cpu = {c["label"] for c in configurations("tiny", "cpu", TABLE4_METHODS)}
    assert not any(label.endswith(("+flex", "+sdpa")) for label in on_cpu)


def test_a_configuration_failing_in_a_timed_round_is_dropped_with_its_reason_and_the_others_go_on(monkeypatch):
    """Forty engines share one GPU: one running out of memory in round 2 keeps its reason and loses its rounds,
    the others keep all theirs. Steps stand in for the engines here: what is checked is the part's bookkeeping."""
    import types
    from tools.gpu_check import train_speed

    class Step:
        def __init__(self, label):
            self.label, self.calls = label, 0
            self.args = types.SimpleNamespace(train_micro_batch_size_per_gpu=4, seq_length=64)

        def __call__(self):
            self.calls += 1
            if self.label == "alibi" and self.calls > 1 + 2:  # warm-up, then round 1's two steps
                raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB\nmore lines")
            return 0.0

    monkeypatch.setattr(train_speed, "build", lambda config, profile, device: Step(config["label"]))
    result = train_speed.measure("tiny", "cpu", ["none", "alibi"], steps=2, rounds=3, warmup=1, budget=600)
    configs = {c["label"]: c for c in result["configs"]}
    assert configs["alibi"]["error"] == "RuntimeError in round 2: CUDA out of memory. Tried to allocate 2.00 GiB"
    assert "seconds_per_step" not in configs["alibi"]
    assert len(configs["none"]["rounds"]) == result["rounds_run"] == 3
    assert configs["none"]["tokens_per_s"] == 256 / configs["none"]["seconds_per_step"]


def test_the_evaluation_table_compares_the_kernel_with_the_materialised_bias_where_both_ran():
    """The report's evaluation section from rows as a GPU run writes them: each path's memory growth, the kernel's
    speed and peak against `sdpa`'s at the longest length both ran, and the longest one-pass sequence."""
    from tools.gpu_check import report
    rows = [{"impl": "triton", "length": 1024, "seconds": 1.0, "tokens_per_s": 1024.0, "peak_mb": 10.0},
            {"impl": "triton", "length": 4096, "seconds": 2.0, "tokens_per_s": 2048.0, "peak_mb": 40.0},
            {"impl": "sdpa", "length": 1024, "seconds": 0.5, "tokens_per_s": 2048.0, "peak_mb": 20.0},
            {"impl": "sdpa", "length": 4096, "seconds": 4.0, "tokens_per_s": 1024.0, "peak_mb": 320.0},
            {"impl": "auto", "length": 1024, "seconds": 0.5, "tokens_per_s": 2048.0, "peak_mb": 20.0},
            {"impl": "auto", "length": 4096, "skipped": "time budget spent (~9 s expected, 1 s left)"}]
    lines = "\n".join(report._eval({"method": "kerple_log", "model": "m", "dtype": "bfloat16", "weights_mb": 1,
                                     "peak_memory": "p", "rows": rows}))
    assert "`sdpa` 1024->4096: 2.00; `triton` 1024->4096: 1.00." in lines  # 4x the length: 16x and 4x the memory
    assert ("At 4,096 tokens, the longest length both ran: `triton` at 2.00x `sdpa`'s tokens/s, 40 MB against "
            "320 MB") in lines
    assert "Longest sequence scored in one pass: 4,096 tokens with `triton`, 2.0 s." in lines
    assert "| 4096 | time budget spent (~9 s expected, 1 s left) |" in lines

# ------------------------------------------------------------------------------------ wheels
def test_wheels_are_the_requirements_closure_minus_the_gpu_image():
    from tools.gpu_check.wheels import carried_packages, pinned_requirements
    carried = carried_packages()
    assert set(carried) == {"deepspeed", "megatron-core", "lm-dataformat", "jsonlines", "ujson", "zstandard",
                            "hjson", "pydantic", "pydantic-core", "annotated-types", "typing-inspection",
                            "typing-extensions", "rotary-embedding-torch",
                            "x-transformers", "einx", "loguru", "frozendict", "torch-einops-utils",  # test_fox.py
                            "wonderwords",  # lm-eval's RULER tasks (eval.py)
                            "fla-core"}  # test_stickbreaking.py's and test_path.py's naive references
    pins = pinned_requirements()
    assert carried["deepspeed"] == pins["deepspeed"] and carried["megatron-core"] == pins["megatron-core"]
    assert "torch" not in carried and "transformers" not in carried  # the image's own


# ------------------------------------------------------------------------------------ on CUDA
HEADS, HEAD_DIM, LENGTH, WINDOWS = 4, 32, 200, (None, 70)  # 200 tokens: a full 128-token tile and a ragged one


def make_pe(name):
    torch.manual_seed(0)
    pe = build_positional_embedding(name, num_heads=HEADS, head_dim=HEAD_DIM, hidden_size=HEADS * HEAD_DIM,
                                    **({"max_position_embeddings": LENGTH} if name == "learned" else {}))
    with torch.no_grad():  # off the initial values, so no term is special
        for p in pe.parameters():
            p.add_(0.3 * torch.rand_like(p))
    return pe


def not_a_biased_softmax(pe) -> bool:
    """Methods whose attention is not softmax(q.k / sqrt(D) * weight + bias): those with a channel only the
    written-out block computes (a score rewrite: cope, dape; a replaced softmax: stickbreaking; transformed keys:
    path; decayed dot products: wall)."""
    return bool(pe.channels & WRITTEN_OUT)


def float64_reference(pe, q, k, v, window):
    """(output, terms): softmax(q.k / sqrt(D) * weight + bias) over keys j <= i (and i - j < window), in float64
    on the CPU, written out with an explicit mask; differentiable in q, k, v and the kernel parameters. `terms`
    holds the bias and weight tensors (retain_grad: after a backward their .grad is the loss's derivative in
    each), or is empty. For the methods that are not such a softmax, the project's written-out path in
    float64 on the CPU (`sdpa`: the whole score matrix), which the CPU tests tie to the papers' formulas and
    to x-transformers and flash-linear-attention (tests/model/positional/)."""
    if not_a_biased_softmax(pe):
        plan = plan_attention(pe, torch.arange(LENGTH), AttentionRun(impl="sdpa", window=window, block_size=64,
                                                                     needs_grad=True, dropout_p=0.0,
                                                                     dtype=torch.float64))
        return attend(q, k, v, plan), {}
    terms = {"bias": pe.bias(LENGTH, LENGTH), "weight": pe.weight(LENGTH, LENGTH)}
    terms = {name: term for name, term in terms.items() if term is not None}
    for term in terms.values():
        if term.requires_grad:
            term.retain_grad()
    scores = q @ k.transpose(-1, -2) / math.sqrt(HEAD_DIM)
    if "weight" in terms:
        scores = scores * terms["weight"].double()
    if "bias" in terms:
        scores = scores + terms["bias"].double()
    i, j = torch.arange(LENGTH)[:, None], torch.arange(LENGTH)[None, :]
    visible = (j <= i) & ((i - j < window) if window else True)
    return scores.masked_fill(~visible, float("-inf")).softmax(dim=-1) @ v, terms


def summed_magnitudes(pe, terms, name) -> torch.Tensor | None:
    """Each element's sum over the L x L entries of |d loss / d term x d term / d element| (the terms' derivatives
    by central differences, two evaluations of the terms per element): what the parameter's gradient sums
    before cancellation. A rounding error is bounded relative to this, not to the cancelled sum: FIRE's c and
    threshold cancel by 10^2-10^4 (355-8,350 here; a GPU run, an H200). The methods compute their terms in
    fp32 even in a float64 copy (positional_embeddings/base.py), so the step is 1e-3 there: a magnitude is
    needed to a few digits only. None where no term is learnable."""
    parameter = dict(pe.named_parameters())[name]
    terms = {key: term for key, term in terms.items() if term.grad is not None}
    if not terms:
        return None
    relative_step = 1e-6 if all(t.dtype == torch.float64 for t in terms.values()) else 1e-3
    magnitudes = []
    with torch.no_grad():
        for index in range(parameter.numel()):
            value = parameter.view(-1)[index].item()
            step = relative_step * max(1.0, abs(value))
            evaluated = []
            for shifted in (value + step, value - step):
                parameter.view(-1)[index] = shifted
                evaluated.append({"bias": pe.bias(LENGTH, LENGTH), "weight": pe.weight(LENGTH, LENGTH)})
            parameter.view(-1)[index] = value
            magnitudes.append(sum((term.grad * (evaluated[0][key] - evaluated[1][key]) / (2 * step)).abs().sum()
                                  for key, term in terms.items()).item())
    return torch.tensor(magnitudes, dtype=torch.float64).view_as(parameter)


def gradients(pe, q, k, v, out, probe):
    (out.double() * probe).sum().backward()
    found = {"q": q.grad, "k": k.grad, "v": v.grad}
    found.update({name: p.grad for name, p in pe.named_parameters()})
    return {key: None if g is None else g.double().cpu() for key, g in found.items()}


def close(actual, expected, rtol, atol=0.0) -> bool:
    """Norm-wise: |a - e| <= rtol |e| + atol."""
    return (actual - expected).norm().item() <= rtol * expected.norm().item() + atol


def relative_error(actual, expected) -> str:
    """For the failure message: what a GPU run measured, so the next session sees the number."""
    return f"relative error {(actual - expected).norm().item() / max(expected.norm().item(), 1e-30):.2e}"


@pytest.mark.cuda
@CUDA
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", METHODS)
def test_every_path_on_cuda_matches_the_float64_reference(name, dtype):
    check_every_path(name, dtype, "cuda")


@pytest.mark.parametrize("name", ["fire", "kerple_log"])
def test_every_path_on_the_cpu_matches_the_float64_reference(name):
    """The CUDA check's bounds, on the CPU's paths in fp32 (no flex: no CPU backward): FIRE's cancelling scalars
    against their summed magnitudes, KERPLE's per-head parameters norm-wise."""
    check_every_path(name, torch.float32, "cpu")


ON_CUDA_WHERE_THEY_RUN = ("triton", "sdpa_mask_gradient")


def check_every_path(name, dtype, device):
    # bf16: ~3e-3 is typical; a kernel parameter's gradient sums L x L terms that partly cancel, so those get
    # 1e-1, which still fails a gradient that is missing or wrong. Where a gradient sums terms that cancel by
    # 10^2-10^4 (FIRE's c and threshold: summed_magnitudes), the error is bounded relative to the terms' summed
    # magnitudes: 1e-5 in fp32 (~170 units of its rounding), one unit of bf16's (2^-8) in bf16, which at that
    # cancellation cannot fix such a gradient's sign: the check there is only that it is not far off.
    tolerance, parameter_tolerance, magnitude_tolerance = (1e-4, 1e-4, 1e-5) if dtype == torch.float32 else (3e-2, 1e-1, 2**-8)
    torch.manual_seed(1)
    inputs = [(2 * torch.randn(2, HEADS, LENGTH, HEAD_DIM)).to(dtype) for _ in range(3)]
    probe = torch.randn(2, HEADS, LENGTH, HEAD_DIM, dtype=torch.float64)
    for window in WINDOWS:
        pe = make_pe(name)
        reference_pe = copy.deepcopy(pe).double()
        q, k, v = (t.double().requires_grad_() for t in inputs)
        expected_out, terms = float64_reference(reference_pe, q, k, v, window)
        expected = gradients(reference_pe, q, k, v, expected_out, probe)
        # flex: FlexAttention's score_mod expresses per-entry terms only, and has no backward on the CPU.
        flex = ("query_terms" not in pe.channels) and not not_a_biased_softmax(pe) and device != "cpu"
        # On CUDA also the `triton` kernel and `sdpa_mask_gradient`, where they run (a distance table; a learnable one).
        for impl in ("sdpa", "blocked") + (("flex",) if flex else ()) + (ON_CUDA_WHERE_THEY_RUN if device == "cuda" else ()):
            device_pe = copy.deepcopy(pe).to(device)
            device_pe.zero_grad(set_to_none=True)
            q, k, v = (t.detach().to(device).requires_grad_() for t in inputs)
            try:
                plan = plan_attention(device_pe, torch.arange(LENGTH, device=device),
                                      AttentionRun(impl=impl, window=window, block_size=64, needs_grad=True,
                                                   dropout_p=0.0))
            except NeoXArgsError:
                if impl in ON_CUDA_WHERE_THEY_RUN:
                    continue
                raise
            if impl in ON_CUDA_WHERE_THEY_RUN and plan.path != impl:
                continue  # sdpa_mask_gradient without a learnable table: the `sdpa` path's own strategies
            out = attend(q, k, v, plan)
            assert out.dtype == dtype and plan.path == impl
            where = f"{name} {impl} {dtype} window {window}"
            got_out = out.detach().double().cpu()
            assert close(got_out, expected_out.detach(), tolerance), f"{where}: {relative_error(got_out, expected_out.detach())}"
            scale = expected["q"].norm().item()
            for key, got in gradients(device_pe, q, k, v, out, probe.to(device)).items():
                if expected[key] is None or expected[key].norm() < 1e-4 * scale:
                    # Zero in exact arithmetic (FIRE's output bias shifts a whole row of scores): only noise.
                    assert got is None or got.norm() < tolerance * scale, f"{where}: gradient of {key} where none is due"
                    continue
                assert got is not None, f"{where}: no gradient reached {key}"
                rtol = tolerance if key in ("q", "k", "v") else parameter_tolerance
                if close(got, expected[key], rtol):
                    continue
                # Else: within the rounding bound of its summed magnitudes, where the method computes them.
                magnitudes = None if key in ("q", "k", "v") else summed_magnitudes(reference_pe, terms, key)
                assert magnitudes is not None, f"{where}: gradient of {key}: {relative_error(got, expected[key])}"
                error, bound = (got - expected[key]).norm().item(), magnitudes.norm().item()
                assert error <= magnitude_tolerance * bound, (
                    f"{where}: gradient of {key}: error {error:.2e}, {error / bound:.2e} of the summed magnitudes "
                    f"{bound:.3e} ({relative_error(got, expected[key])})")


@pytest.mark.cuda
@CUDA
@pytest.mark.parametrize("name", METHODS)
def test_the_model_on_cuda_matches_the_model_on_the_cpu(name):
    """Logits and every parameter's gradient, fp32, each CUDA path against the CPU's `sdpa` path."""
    config = {"num_layers": 2, "hidden_size": HEADS * HEAD_DIM, "num_attention_heads": HEADS, "seq_length": LENGTH,
              "attention_block_size": 64, "train_micro_batch_size_per_gpu": 2, "pos_emb": name}
    ids = torch.randint(0, 96, (2, LENGTH), generator=torch.Generator().manual_seed(2))

    def run(impl, device):
        args = NeoXArgs.from_dict(config | {"attention_impl": impl})
        torch.manual_seed(0)
        model = GPTModel(model_config(args, 128)).to(device)
        logits = model(ids.to(device))
        logits.float().square().mean().backward()
        return logits.detach().double().cpu(), {n: p.grad.double().cpu() for n, p in model.named_parameters()
                                                if p.grad is not None}

    expected_logits, expected_grads = run("sdpa", "cpu")
    pe = make_pe(name)  # flex: per-entry terms only (its refusals: test_flex_refuses_what_it_cannot_do)
    impls = ("sdpa", "blocked", "flex") if ("query_terms" not in pe.channels) and not not_a_biased_softmax(pe) else ("sdpa", "blocked")
    for impl in impls:
        logits, grads = run(impl, "cuda")
        assert close(logits, expected_logits, 1e-4), f"{name} {impl} logits"
        assert grads.keys() == expected_grads.keys(), f"{name} {impl}: gradients reach other parameters"
        scale = max(g.norm().item() for g in expected_grads.values())
        for key, grad in grads.items():  # atol: gradients that are zero in exact arithmetic (FIRE's output bias)
            assert close(grad, expected_grads[key], 1e-3, 1e-6 * scale), f"{name} {impl}: gradient of {key}"


@pytest.mark.cuda
@CUDA
def test_bf16_deepspeed_step_on_cuda_through_flexattention(stdlib_data, tmp_path):
    from megatron.neox_arguments.to_training import step_run
    from megatron.tokenizer import build_tokenizer
    from megatron.training.loop import setup_model_and_optimizer, train_step
    # `auto` would take `sdpa` at 64 tokens (its mask fits the memory budget): FlexAttention's backward is asked for.
    args = tiny_args(stdlib_data, tmp_path, precision="bf16", attention_impl="flex", warmup=0.0, save=None,
                     load=None, train_micro_batch_size_per_gpu=4)
    args.join_process_group()
    tokenizer = build_tokenizer(args.tokenizer_run())
    engine, optimizer = setup_model_and_optimizer(args.training_run(), tokenizer.padded_vocab_size)
    weights = next(engine.module.parameters())
    assert weights.device.type == "cuda" and weights.dtype == torch.bfloat16  # DeepSpeed chose CUDA
    assert optimizer.defaults.get("fused") or "Fused" in type(optimizer).__name__
    kernel = [p for pe in engine.module.positional_embeddings() for p in pe.parameters()]
    before = [p.detach().float().clone() for p in kernel]
    tokens = torch.randint(0, 256, (4, 65), generator=torch.Generator().manual_seed(0))
    batch = {"tokens": tokens[:, :-1], "labels": tokens[:, 1:], "loss_mask": torch.ones(4, 64)}
    losses = [train_step(step_run(args), engine, optimizer, iter([batch]), tokenizer.vocab_size) for _ in range(3)]
    assert all(math.isfinite(s.loss) and not s.skipped for s in losses)
    assert losses[-1].loss < losses[0].loss  # the same batch thrice: it is being learned
    assert all(not torch.equal(b, p.detach().float()) for b, p in zip(before, kernel)), "kernel parameters never moved"
