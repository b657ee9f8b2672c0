"""tools/reproduce stopped by the user or killed outright while a run trains (issue 24, rows 7 and 16):
SIGINT to the sweep's process group stops the sweep (status 130) with nothing of the run left running
and no next run started; `kill -KILL` of the sweep process alone still stops its deepy.py and ranks (a failed run's
report naming the reason its ranks printed: tests/reproduce/test_reproduce_signals.py)."""
import os
import pathlib
import signal
import subprocess
import sys
import time

import psutil
import yaml

from tests.support.reproduce import REPO_ROOT, write_corpus

GONE_SECONDS = 40


def long_sweep(tmp_path: pathlib.Path) -> pathlib.Path:
    """Two runs, one at a time, each far too long to finish: the first is still training when signalled."""
    write_corpus(tmp_path / "code.jsonl", documents=60)
    spec = {
        "name": "signals", "scale": "test grid: stopped mid-run", "profile": ["configs/tiny.yml"],
        "methods": ["kerple_log", "alibi"], "seeds": [7], "datasets": ["code"],
        "data": {"code": {"source": str(tmp_path / "code.jsonl"),
                          "prefix": str(tmp_path / "data" / "code_text_document")}},
        "evaluation": {"eval-lengths": [64], "eval-modes": ["nonoverlap"], "eval-chunks": 2, "eval-split": "valid"},
        "set": {"train-iters": 100_000, "eval-interval": 100_000, "eval-iters": 1, "log-interval": 1,
                "checkpoint-factor": 100_000, "split": "90,5,5"},
        "work_dir": str(tmp_path / "work"), "report_dir": str(tmp_path / "report"), "jobs": 1,
    }
    path = tmp_path / "sweep.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


def start_training(tmp_path):
    """The sweep in its own process group, returned once its first run's rank has taken a few steps,
    with every process it has started by then."""
    sweep = subprocess.Popen([sys.executable, "-m", "tools.reproduce", str(long_sweep(tmp_path))], cwd=REPO_ROOT,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    log = tmp_path / "work" / "code" / "kerple_log" / "seed7" / "train.log"
    deadline = time.time() + 180
    while time.time() < deadline and sweep.poll() is None:
        if log.is_file() and " 3/100000" in log.read_text(errors="replace"):
            children = psutil.Process(sweep.pid).children(recursive=True)
            assert any("train.py" in " ".join(p.cmdline()) for p in children), children
            return sweep, children
        time.sleep(0.5)
    sweep.kill()
    raise AssertionError("the sweep's first run never trained: " + sweep.communicate()[0][-3000:] +
                         (log.read_text()[-3000:] if log.is_file() else ""))


def survivors(processes, seconds=GONE_SECONDS):
    """Those of `processes` still running (not exited, not a zombie) after up to `seconds`."""
    deadline = time.time() + seconds
    while True:
        alive = []
        for process in processes:
            try:
                if process.is_running() and process.status() != psutil.STATUS_ZOMBIE:
                    alive.append(process)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.time() > deadline:
            return alive
        time.sleep(0.5)


def test_sigint_to_the_sweep_stops_it_and_its_run(tmp_path):
    sweep, children = start_training(tmp_path)
    try:
        os.killpg(sweep.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole group
        output, _ = sweep.communicate(timeout=GONE_SECONDS + 60)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 130, output[-3000:]
    assert "the sweep stopped on SIGINT: interrupted code/kerple_log/seed7 (in train.py)" in output, output[-3000:]
    assert "Re-run the same command to resume" in output and "FAILED" not in output
    assert not survivors(children), [p.cmdline() for p in survivors(children, 0)]
    assert not (tmp_path / "work" / "code" / "alibi").exists()  # the next run never started
    assert "global_step" in (tmp_path / "work" / "code" / "kerple_log" / "seed7" / "checkpoints" / "latest").read_text()


def test_kill_of_the_sweep_stops_its_deepy_and_ranks(tmp_path):
    sweep, children = start_training(tmp_path)
    try:
        sweep.kill()  # the sweep process alone, by SIGKILL: no handler of its own runs
        sweep.communicate(timeout=30)
        left = survivors(children)
    finally:
        for process in survivors(children, 0):  # never leave a trainer behind, even when the test fails
            process.kill()
    assert not left, [p.cmdline() for p in left]
