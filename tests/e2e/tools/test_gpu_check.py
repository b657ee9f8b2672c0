"""`make gpu-check` started as a user starts it, on a machine without CUDA: it refuses in one line (status 2,
nothing run or written); its parts run end to end at toy sizes (`--device cpu --tiny`), the training-loop part
tokenizes, trains, saves and resumes; the tests part stopped at its limit still says why tests failed; the
gpu-mini sweep is valid for the sweep (tools/reproduce/) and for deepy.py."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch

from megatron.model import GPTModel
from megatron.model.positional_embeddings import available
from megatron.neox_arguments.to_model import model_config
from tests.support.training import REPO_ROOT


def gpu_check(*argv, timeout=60):
    return subprocess.run([sys.executable, "-m", "tools.gpu_check", *map(str, argv)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA: the check would run")
def test_make_gpu_check_refuses_without_cuda_in_one_line(tmp_path):
    out, site = tmp_path / "report", tmp_path / "site"
    done = subprocess.run(["make", "--no-print-directory", "gpu-check", f"GPU_CHECK_ARGS=--out {out} --site {site}"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0
    assert done.stdout.splitlines() == [
        f"gpu-check: no CUDA device here (torch.cuda.is_available() is False: a CPU-only build of torch "
        f"{torch.__version__}); run `make gpu-check` on a machine with a CUDA GPU"], done.stdout + done.stderr
    assert "Error 2" in done.stderr  # make's own line: the recipe's status was the check's 2
    assert not out.exists() and not site.exists()  # nothing installed, nothing written
    direct = gpu_check("--out", out)
    assert direct.returncode == 2 and direct.stdout == done.stdout and direct.stderr == ""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU smoke run; on this machine the real check runs")
def test_every_part_runs_end_to_end_on_the_cpu_at_toy_sizes(tmp_path):
    # The training-loop part needs GPT-2's files staged: its own test below.
    done = gpu_check("--device", "cpu", "--tiny", "--out", tmp_path, "--parts", "tests", "train", "eval", "fla",
                     "--budget", "fla=75", timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.splitlines()[-1].startswith("gpu-check: passed in ")
    results = json.loads((tmp_path / "report.json").read_text())
    assert results["environment"]["deepspeed_accelerator"] == "cpu"
    assert results["budgets_s"]["fla"] == 75 and results["budgets_s"]["eval"] == 120  # --budget's, the default
    tests = results["tests"]
    assert tests["exit_code"] == 0 and tests["counts"]["skipped"] >= len(available())  # the cuda tests, skipped here
    train = {c["label"]: c for c in results["train"]["configs"]}
    ours = {"none", "kerple_log", "rotary"}
    # `triton` joins only when the check ran under Triton's interpreter (TRITON_INTERPRET=1, ~30 s a step): a worker
    # of the test run may have it set; its row is then timed like the others.
    assert set(train) - {"kerple_log+triton", "kerple_log+sink+triton"} == {
        "none", "kerple_log", "kerple_log+sdpa_mask_gradient", "kerple_log+sink", "alibi", "rotary", "hf_gpt_neox"} | {
        f"{m}+{variant}" for m in ours for variant in ("bf16", "old-step", "compiled")} | {
        "none+full-head", "none@256", "kerple_log@256"}  # training at a longer length, as many tokens per step
    for config in train.values():  # compiling may take the build half of the budget on a busy CPU
        if config["label"].endswith("+compiled") and "error" in config:
            assert config["error"].startswith("not built: half of the"), config
            continue
        assert config["seconds_per_step"] > 0 and len(config["rounds"]) == results["train"]["rounds_run"] >= 1
    assert set(results["train"]["profiles"]) == {"none+bf16", "none+old-step"}  # the tiny profile is fp32
    assert results["train"]["profiles"]["none+bf16"]["top"][0]["ms_per_step"] > 0
    evaluation = {(r["impl"], r["length"]): r for r in results["eval"]["rows"]}
    assert set(evaluation) == {(impl, L) for impl in ("auto", "sdpa") for L in (128, 256)}
    for row in evaluation.values():
        assert row["tokens_per_s"] > 0 and row["finite"]
    # An untimed pass first where a path may compile for the length (`auto`: FlexAttention on CUDA), else only at
    # the path's first length.
    assert [evaluation[impl, L]["warm_up_pass"] for impl in ("auto", "sdpa") for L in (128, 256)] == [
        True, True, True, False]
    # The same random weights and tokens: the two paths score alike.
    assert evaluation["auto", 256]["mean_loss"] == pytest.approx(evaluation["sdpa", 256]["mean_loss"], abs=1e-3)
    report = (tmp_path / "report.md").read_text()
    assert "Developer smoke run at toy sizes" in report and "**Verdict: passed**" in report
    assert "| kerple_log | auto |" in report and "| 0.307 | 1.017 |" in report  # the paper's, labelled
    assert "| hf_gpt_neox | transformers sdpa |" in report and "| none+old-step | auto |" in report
    assert "### Profile of `none+old-step`" in report
    assert train["kerple_log@256"]["tokens_per_step"] == train["none"]["tokens_per_step"] == 256
    long_ratio = train["kerple_log@256"]["seconds_per_step"] / train["none@256"]["seconds_per_step"]
    assert f"| kerple_log@256 | auto | {train['kerple_log@256']['seconds_per_step']:.4f} |" in report
    assert f"| {long_ratio:.3f} |  |" in report  # against none@256; no ALiBi at that length
    assert "Goal (not a test): at the long length, within 1.1x of `none` there: " in report
    assert (tmp_path / "tests.log").is_file()
    # The guide's multi-GPU command needs two GPUs: the CPU rehearsal says it did not run and why.
    assert tests["two_ranks"]["outcome"] == "not run: it needs two GPUs and this machine has 0"
    assert ("Two GPUs, the GPU guide's multi-GPU command "
            "(`tests/e2e/training/test_training.py::test_deepy_trains_the_tiny_profile[2]`): "
            "not run: it needs two GPUs and this machine has 0") in report
    # fla's kernels need CUDA: on CPU the part times this project's path alone and says why (the fla
    # strategy's conventions are checked against fla's naive.py by tests/model/positional/test_fla_kernels.py).
    fla = {r["method"]: r for r in results["fla"]["rows"]}
    assert set(fla) == {"fox", "stickbreaking", "path", "path_fox"}
    for row in fla.values():
        assert row["ours_fp32_seconds"] > 0 and "fla_bf16" not in row, row
        assert row["fla"].startswith("fla's Triton kernels need CUDA; "), row
    assert "| path_fox | 128 | sdpa_written_out |" in report and "fla's Triton kernels need CUDA; " in report


def test_the_training_loop_part_tokenizes_trains_saves_and_resumes(shared_dir, tmp_path):
    import shutil
    from megatron.data.stdlib_corpus import write_stdlib_corpus
    data = tmp_path / "staged"
    data.mkdir()
    for name in ("gpt2-vocab.json", "gpt2-merges.txt"):
        shutil.copy(shared_dir / "data" / "gpt2" / name, data / name)
    # 1 MB of the corpus (`--stage` copies all of it): eight steps of 4 x 64 tokens need far less, and tokenizing
    # takes time in proportion to the bytes.
    write_stdlib_corpus(str(data / "stdlib.jsonl.zst"), max_bytes=1_000_000)
    done = subprocess.run([sys.executable, "-m", "tools.gpu_check.train_loop", "--json", tmp_path / "loop.json",
                           "--profile", "tiny", "--device", "cpu", "--data", data, "--budget", "400"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stdout + done.stderr
    loop = json.loads((tmp_path / "loop.json").read_text())
    assert "error" not in loop, loop
    assert [launch["exit_code"] for launch in loop["launches"]] == [0, 0]
    assert loop["resumed_from"] == "global_step4" and loop["resumed_first_logged_step"] == 6
    assert loop["checkpoints"] == ["global_step4", "global_step8"] and loop["loss_last"] < loop["loss_first"]
    assert loop["tokens"] > 100_000  # GPT-2 tokens of the corpus slice, tokenized by preprocess_data.py


def running(pid: int) -> bool:
    """Whether process `pid` exists and is not a zombie (one killed and not yet reaped has ended)."""
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_the_tests_part_stopped_at_its_limit_still_reports_why_tests_failed(tmp_path, monkeypatch):
    """The log keeps each failure's traceback as it happens (tools/gpu_check/failure_reasons.py), so a run
    stopped at its limit still says why tests failed: a GPU run that reports failures without reasons costs a
    second start of the machine. Two xdist workers, as on the GPU machine (6 there). The worker still busy at
    the limit is killed with pytest (tools/gpu_check/processes.py): left running, it used the GPU while the
    next part was being timed."""
    from tools.gpu_check import tests_part
    suite, worker_pid = tmp_path / "test_suite.py", tmp_path / "worker.pid"
    suite.write_text("import os, pathlib, time\n\n"
                     "def test_fails_with_a_reason():\n    assert 1 + 1 == 3, 'the reason the report must keep'\n\n"
                     f"def test_outlives_the_limit():\n    pathlib.Path({str(worker_pid)!r}).write_text(str(os.getpid()))\n"
                     "    time.sleep(600)\n")
    monkeypatch.setattr(tests_part, "WORKERS", 2)
    # The limit is waited out in full: 12 s, over twice the 5.5 s the workers took to fail the one test and start
    # the other on the 2-core machine at load 7.
    result = tests_part.run(False, 1, dict(os.environ), 12, tmp_path / "tests.log", files=(str(suite),))
    log = (tmp_path / "tests.log").read_text()
    assert result["timed_out"]
    assert not running(int(worker_pid.read_text())), "the xdist worker outlived the tests part's time limit"
    assert tests_part.failure_reasons(log) == {  # the report's line beside the failed test
        next(name for name in tests_part.failure_reasons(log)): "AssertionError: the reason the report must keep"}
    reason = log.index("FAILURE REASON")
    assert "test_fails_with_a_reason (call)" in log[reason:] and "the reason the report must keep" in log[reason:]


# ---------------------------------------------------------------------------------- gpu-mini
def test_gpu_mini_sweep_is_the_papers_recipe_at_30m_parameters():
    from tools.reproduce.execute import launch_command
    from tools.reproduce.runs import plan_runs
    from tools.reproduce.spec import load_sweep
    sweep = load_sweep(REPO_ROOT / "configs/reproduce/gpu-mini.yml")
    runs = plan_runs(sweep, [sweep.data[n] for n in sweep.datasets])
    assert len(runs) == 7 * 2 + 2  # 7 methods x 2 seeds, and the windowed baseline of each seed
    args = [run.args() for run in runs]  # every run's config validates
    first = args[0]
    assert (first.seq_length, first.train_micro_batch_size_per_gpu, first.precision) == (512, 32, "bf16")
    assert first.tokenizer_type == "GPT2BPETokenizer" and first.no_weight_tying
    assert sweep.evaluation["eval_lengths"] == [512, 1024, 2048, 4096, 8192, 16384]
    with torch.device("meta"):  # GPT-2's 50257 tokens padded to 128
        parameters = sum(p.numel() for p in GPTModel(model_config(first, 50304)).parameters())
    assert 20e6 <= parameters <= 40e6 and f"{parameters / 1e6:.1f}M-parameter" in sweep.scale

    plan = subprocess.run([sys.executable, "-m", "tools.reproduce", "configs/reproduce/gpu-mini.yml", "--dry-run"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert plan.returncode == 0, plan.stderr
    lines = plan.stdout.splitlines()
    assert sum(" train.py " in line for line in lines) == 14 and sum(" evaluate.py " in line for line in lines) == 16
    # The exact command the sweep launches for its first run, checked by deepy.py itself.
    command = launch_command("train.py", sweep.profile, runs[0].training_overrides())
    checked = subprocess.run(command + ["--dry-run"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stderr
    # `-m deepspeed.launcher.runner` after the interpreter's own path (python, python3, a venv's).
    assert "num_layers                      6" in checked.stdout and " -m deepspeed.launcher.runner" in checked.stdout
