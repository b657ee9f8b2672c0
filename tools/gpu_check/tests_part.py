"""Part 1 of the GPU check: the test files that exercise the device, run by pytest with the GPU present.

Which tests run where: DeepSpeed picks its accelerator itself, so the training, checkpoint and
evaluation tests (engine, bf16 step, save and resume, evaluate.py) run on CUDA when it is there. The
attention and model tests build their tensors on the default device, the CPU; their CUDA versions are
the `cuda`-marked tests (tests/tools/test_gpu_check.py: every path x every method, forward and gradients in
fp32 and bf16 against the materialised reference). NEOX_TEST_DEVICE is set to the device for a future
conftest fixture that would move those files' tensors too (no test reads it yet).
"""
import pathlib
import re
import subprocess
import sys
import time

from tools.gpu_check import failure_reasons as failure_reasons_plugin
from tools.gpu_check.processes import run_whole_group

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# In order of importance: a run cut short by its time limit has done the first ones.
# test_model.py is last: it runs the CPU paths (under the image's torch), the least a GPU adds; a run of
# 2026-11-27 ran out of its limit before fla's CUDA tests and five checkpoint tests.
# A file's tests that start processes are in its tests/e2e/ mirror, listed beside it.
FILES = ("tests/tools/test_gpu_check.py", "tests/e2e/tools/test_gpu_check.py",
         "tests/model/attention/test_attention.py", "tests/e2e/model/attention/test_attention.py",
         "tests/model/positional/test_fla_kernels.py",
         "tests/training/test_training.py", "tests/e2e/training/test_training.py",
         "tests/e2e/checkpoint/test_checkpoint.py", "tests/e2e/evaluation/test_evaluation_end_to_end.py", "tests/model/test_model.py")
# The GPU guide's multi-GPU command (docs/gpu/README.md), as the two-rank launch test runs it: with two or more
# GPUs it runs on CUDA (NCCL) whichever test files were asked for.
TWO_RANK_TEST = "tests/e2e/training/test_training.py::test_deepy_trains_the_tiny_profile[2]"
# Two ranks on one GPU: NCCL refuses two ranks on one device.
NEEDS_TWO_DEVICES = (TWO_RANK_TEST,
                     "tests/e2e/checkpoint/test_checkpoint.py::test_two_ranks_stop_together_on_sigterm_and_resume",
                     "tests/e2e/evaluation/test_evaluation_end_to_end.py::test_deepy_on_two_ranks_writes_the_same_result_as_one_process")
TINY_SELECTION = ("tests/tools/test_gpu_check.py", "-m", "cuda")  # the smoke run: collect and skip the CUDA tests
# -v's outcome lines: `tests/x.py::t PASSED` in one process, `[gw3] [ 12%] PASSED tests/x.py::t` under xdist.
OUTCOME = re.compile(r"^(?:(?P<test>tests/\S+::\S+) (?P<status>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)"
                     r"|\[gw\d+\] \[ *\d+%\] (?P<status2>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS) (?P<test2>tests/\S+::\S+))")
# Test processes on the GPU machine (16 cores; most tests launch processes or wait on a compile); 0 runs one.
WORKERS = 6


def command(tiny: bool, devices: int, files=FILES) -> list[str]:
    # failure_reasons: each failure's traceback in the log as it happens (a run stopped at its limit keeps them).
    base = [sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-p", "tools.gpu_check.failure_reasons",
            "-rfE", "--tb=short"]
    if tiny:
        return base + list(TINY_SELECTION)
    base += ["-n", str(WORKERS)] if WORKERS else []
    deselect = [arg for test in NEEDS_TWO_DEVICES for arg in ("--deselect", test)] if devices < 2 else []
    files = list(files)
    if devices >= 2 and not {TWO_RANK_TEST, TWO_RANK_TEST.split("::")[0]} & set(files):
        files.append(TWO_RANK_TEST)
    # `-m "not slow"` replaces pyproject's `not slow and not cuda`: the cuda tests run here.
    return base + ["-m", "not slow", *deselect, *files]


def two_ranks(tiny: bool, devices: int, outcomes: dict) -> dict:
    """The report's line on the guide's multi-GPU command: the test's outcome, or why it did not run."""
    outcome = (f"not run: it needs two GPUs and this machine has {devices}" if tiny or devices < 2
               else outcomes.get(TWO_RANK_TEST, "not reached").lower())
    return {"test": TWO_RANK_TEST, "outcome": outcome}


def run(tiny: bool, devices: int, env: dict, budget: float, log: pathlib.Path, files=FILES) -> dict:
    argv = command(tiny, devices, files)
    # Inductor compiles in this process, not in a pool of worker processes: the suite's guard refuses a
    # process started by a test not marked `launches` (tests/conftest.py), which a compile pool is not.
    env = {**env, "TORCHINDUCTOR_COMPILE_THREADS": "1"}
    began = time.perf_counter()
    with open(log, "w") as out:
        code = run_whole_group(argv, budget, cwd=REPO_ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
    text = log.read_text(errors="replace")
    outcomes = {}
    for line in text.splitlines():
        found = OUTCOME.match(line)
        if found:
            outcomes[found["test"] or found["test2"]] = found["status"] or found["status2"]
    counts = {}
    for status in outcomes.values():
        counts[status.lower()] = counts.get(status.lower(), 0) + 1
    summary = next((line.strip("= ") for line in reversed(text.splitlines()) if re.search(r"\d+ (passed|failed|skipped)", line)), None)
    return {"command": " ".join(argv[1:]), "exit_code": code, "timed_out": code is None, "budget_s": budget,
            "seconds": round(time.perf_counter() - began, 1), "counts": counts, "summary": summary,
            "deselected": [] if tiny or devices >= 2 else list(NEEDS_TWO_DEVICES),
            "two_ranks": two_ranks(tiny, devices, outcomes),
            "failed": sorted(t for t, s in outcomes.items() if s in ("FAILED", "ERROR")),
            "reasons": failure_reasons(text),
            "log": log.name, "log_tail": text[-3000:] if code not in (0, None) else ""}


def failure_reasons(text: str) -> dict:
    """{test id: the first `E   ` line of its traceback (the exception and its message)}, from the blocks failure_reasons.py writes as each
    failure happens: what the report shows beside each failed test."""
    reasons, test = {}, None
    for line in text.splitlines():
        if line.startswith(failure_reasons_plugin.MARKER):
            test = line[len(failure_reasons_plugin.MARKER):].strip().rsplit(" (", 1)[0]
        elif test and test not in reasons and line.startswith("E   ") and line[4:].strip():
            reasons[test] = line[4:].strip()
    return reasons
