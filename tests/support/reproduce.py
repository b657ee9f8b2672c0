"""What the study runner's tests (tests/reproduce/, in-process, and tests/e2e/reproduce/, which launch it) share:
a small real corpus, a few-step sweep over it, the runner as a process, and hand-made report inputs."""
import json
import pathlib
import subprocess
import sys
import sysconfig

import numpy as np
import yaml

from megatron.evaluation.modes.position import position_fields
from megatron.evaluation.results import SCHEMA, summarize, write_atomic

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
# The YaRN scaling of the extension tests' fine-tunes: 4x the 64-token training length.
YARN = {"type": "yarn", "factor": 4, "original-max-position": 64}


def write_corpus(path: pathlib.Path, documents: int = 200, size: int = 2000) -> None:
    """A small real corpus: pieces of CPython library files as lm_dataformat-style JSON lines."""
    library = sorted(pathlib.Path(sysconfig.get_paths()["stdlib"]).glob("*.py"))
    text = "".join(f.read_text(errors="ignore") for f in library)
    with open(path, "w") as out:
        for i in range(documents):
            out.write(json.dumps({"text": text[i * size:(i + 1) * size], "meta": {"piece": i}}) + "\n")


def sweep_file(tmp_path: pathlib.Path, methods=("kerple_log",)) -> pathlib.Path:
    """Two runs: kerple_log trained for 6 steps, and its windowed baseline; evaluated at 64 and 128."""
    write_corpus(tmp_path / "code.jsonl")
    spec = {
        "name": "test", "scale": "test grid: 0.1M parameters, 6 steps",
        "profile": ["configs/tiny.yml"], "methods": list(methods), "seeds": [7], "datasets": ["code"],
        "data": {"code": {"source": str(tmp_path / "code.jsonl"),
                          "prefix": str(tmp_path / "data" / "code_text_document"), "paper": "GitHub"}},
        "evaluation": {"eval-lengths": [64, 128], "eval-modes": ["nonoverlap", "position"],
                       "eval-chunks": 4, "eval-split": "valid"},
        "set": {"train-iters": 6, "eval-interval": 3, "eval-iters": 1, "log-interval": 2,
                "checkpoint-factor": 6, "split": "90,5,5"},
        "windowed_baseline": "kerple_log", "kernel_figures": ["kerple_log"],
        "position_length": 128, "position_methods": ["kerple_log"],
        "work_dir": str(tmp_path / "work"), "report_dir": str(tmp_path / "report"),
    }
    path = tmp_path / "sweep.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


def ruler_sweep_file(tmp_path: pathlib.Path, ruler: dict) -> pathlib.Path:
    """sweep_file's kerple_log run alone (no windowed baseline) with `ruler`, evaluated at 64 and 512 tokens."""
    path = sweep_file(tmp_path)
    spec = yaml.safe_load(path.read_text())
    spec["evaluation"]["eval-lengths"] = [64, 512]  # niah_single_1 fits no sample at 64 byte-level tokens, 512 does
    spec["position_length"] = 512
    spec["ruler"] = ruler
    del spec["windowed_baseline"]  # one run: training, evaluate.py and eval.py
    path.write_text(yaml.safe_dump(spec))
    return path


def reproduce(*argv, timeout: float = 300) -> subprocess.CompletedProcess:
    """`python -m tools.reproduce ARGV --publish`: these sweeps' report_dir is tmp_path/report (the plan's tests
    check that without --publish the report goes to <work_dir>/report)."""
    return subprocess.run([sys.executable, "-m", "tools.reproduce", *map(str, argv), "--publish"], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=timeout)


def reproduce_here(*argv) -> subprocess.CompletedProcess:
    """`main(ARGV --publish)` of tools.reproduce in this process: for an invocation that launches nothing (a re-run
    of a finished sweep, --report-only, --dry-run), the function `python -m tools.reproduce` runs, without a Python
    start-up and its imports (~4 s of CPU each); each test's first invocation is the command itself. Its status and
    output as `reproduce` returns them. A refusal (SweepError) is raised, for the test to check its message."""
    import contextlib
    import io
    import os
    from tools.reproduce.__main__ import main
    out, err, cwd = io.StringIO(), io.StringIO(), os.getcwd()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main([*map(str, argv), "--publish"])
    finally:
        os.chdir(cwd)  # main() works from the repository root
    return subprocess.CompletedProcess(argv, code, out.getvalue(), err.getvalue())


# Hand-made report inputs: a sweep's name, its runs' result files, training scalars and facts.
T, LENGTHS = 64, (64, 128)


def handmade_sweep_file(tmp_path) -> pathlib.Path:
    spec = {"name": "handmade", "scale": "hand-made inputs", "profile": ["configs/tiny.yml"],
            "methods": ["kerple_log", "alibi"], "seeds": [1, 2], "datasets": ["code"],
            "data": {"code": {"prefix": str(tmp_path / "absent" / "code_text_document"), "paper": "GitHub"}},
            "evaluation": {"eval-lengths": list(LENGTHS), "eval-modes": ["nonoverlap", "position"]},
            "windowed_baseline": "kerple_log", "position_length": 128, "position_methods": ["kerple_log"],
            "claims": {"reference": "kerple_log", "anchor": "alibi", "competitive": "t5", "blow-up": ["sinusoidal", "rotary"],
                       "bounded": ["alibi", "t5", "kerple_log", "kerple_power"]},
            "work_dir": str(tmp_path / "work"), "report_dir": str(tmp_path / "report")}
    path = tmp_path / "sweep.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


def write_inputs(inputs: pathlib.Path) -> None:
    rng = np.random.default_rng(0)
    for pos_emb, window, level in (("kerple_log", None, 2.0), ("kerple_log", T, 2.05), ("alibi", None, 2.2)):
        for seed in (1, 2):
            records = []
            for length in LENGTHS:
                losses = level + rng.normal(0, 0.02, (4, length))
                for mode in ("nonoverlap", "position"):
                    record = {"length": length, "mode": mode, **summarize(losses, length, mode, np.arange(4) * length)}
                    records.append({**record, **position_fields(losses)} if mode == "position" else record)
            method = pos_emb + (f"+window{window}" if window else "")
            name = f"code_{method}_seed{seed}_step10_0123abcd"
            write_atomic(inputs / "results" / f"{name}.json", {"schema": SCHEMA, "results": records, "run": {
                "name": name, "method": method, "pos_emb": pos_emb, "attention_window": window, "seed": seed,
                "dataset": "code", "train_length": T, "checkpoint_step": 10}})
    scalars = {f"code/{m}/seed{s}": {"valid/loss": [[5, 3.0], [10, 2.0]]} for m in ("kerple_log", "alibi") for s in (1, 2)}
    for seed in (1, 2):
        scalars[f"code/kerple_log/seed{seed}"]["train/seconds_per_step"] = [[1, 9.0], [2, 0.5], [3, 0.5]]
        # tiny.yml: 16 sequences x 64 tokens = 1024 tokens a step, so 1024 tokens/s is 1 s a step
        scalars[f"code/alibi/seed{seed}"]["train/tokens_per_sec"] = [[1, 100.0], [2, 1024.0], [3, 1024.0]]
    write_atomic(inputs / "scalars.json", scalars)
    write_atomic(inputs / "facts.json", {"dataset_tokens": {"code": 123456}, "trained_commits": ["abcdef1234"]})


def planned_sweep_file(tmp_path, **data) -> pathlib.Path:
    """A 2 methods x 2 seeds sweep of 10 steps over `data` (name -> its `data` entry), for the plan and the report's
    folder; nothing of it is trained."""
    spec = {"name": "planned", "scale": "plan test", "profile": ["configs/tiny.yml"],
            "methods": ["kerple_log", "alibi"], "seeds": [1, 2], "datasets": list(data),
            "data": data, "evaluation": {"eval-lengths": [64, 128], "eval-modes": ["nonoverlap", "position"]},
            "set": {"train-iters": 10}, "windowed_baseline": "kerple_log",
            "work_dir": str(tmp_path / "work"), "report_dir": str(tmp_path / "published")}
    path = tmp_path / "sweep.yml"
    path.write_text(yaml.safe_dump(spec))
    return path
