"""Running the grid: each run trains (`deepy.py train.py`) and evaluates (`deepy.py evaluate.py`) in its
own subprocess, `jobs` at a time, with progress and an ETA; one failed run never stops the others."""
import concurrent.futures
import datetime
import json
import os
import pathlib
import shlex
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import yaml

from megatron.neox_arguments import NeoXArgsError
from . import REPO_ROOT
from .runs import Run, RunFailed, check_training_config, finished_result, trained_step


def run_grid(runs: list[Run], jobs: int, threads: int) -> dict:
    """Every run through `execute`, `jobs` at a time; returns {run: error}. An evaluation-only run follows
    its base run in the same worker, so no worker waits idle for another's checkpoint."""
    progress, failures = Progress(len(runs), jobs), {}
    follows = {}
    for run in runs:
        if run.base:
            follows.setdefault(id(run.base), []).append(run)
    print(f"{len(runs)} runs, {jobs} at a time, {threads} thread(s) each", flush=True)

    def one(run):
        try:
            progress.finish(run, execute(run, threads))
        except Exception as err:  # noqa: BLE001 - whatever stops one run, the others go on
            failures[str(run)] = str(err) if isinstance(err, (RunFailed, NeoXArgsError)) else repr(err)
            print(f"FAILED {run}: {failures[str(run)]}", flush=True)
            progress.finish(run, 0.0, failed=True)
        for follow in follows.get(id(run), []):
            if str(run) in failures:
                failures[str(follow)] = f"not evaluated: its base run {run} failed"
                progress.finish(follow, 0.0, failed=True)
            else:
                one(follow)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for run in runs:
            if not run.base:
                pool.submit(one, run)
    return failures


def execute(run: Run, threads: int) -> float | None:
    """Train (unless a base run's checkpoint is reused) and evaluate one run; None when already finished."""
    args = run.args()
    digest = check_training_config(run)
    done = finished_result(run, args.train_iters)
    if done and (run.base or trained_step(run) == args.train_iters):
        return None
    began = time.time()
    if not run.base:
        train(run, args.train_iters, digest, threads)
    elif trained_step(run.base) != args.train_iters:
        raise RunFailed(f"its base run {run.base} has no checkpoint at step {args.train_iters}")
    for stale in run.results_dir.glob("*.json"):  # one result file per run: a new checkpoint replaces the old
        stale.unlink()
    launch("evaluate.py", run, run.evaluation_overrides(), run.directory / "evaluate.log", threads)
    if not finished_result(run, args.train_iters):
        raise RunFailed(f"evaluate.py finished but {run.results_dir} holds no complete result for step "
                        f"{args.train_iters}; see {run.directory / 'evaluate.log'}")
    return time.time() - began


def train(run: Run, train_iters: int, digest: str, threads: int) -> None:
    step = trained_step(run)
    if step == train_iters:
        return
    if step is not None and step > train_iters:
        raise RunFailed(f"{run.checkpoints} has a checkpoint at step {step}, past train-iters "
                        f"{train_iters}; delete the run folder or raise train-iters")
    run.directory.mkdir(parents=True, exist_ok=True)
    stamp = {"config_hash": digest, "commit": git_commit()[0]}
    (run.directory / "training_config.json").write_text(json.dumps(stamp))
    launch("train.py", run, run.training_overrides(), run.directory / "train.log", threads)
    if trained_step(run) != train_iters:
        raise RunFailed(f"train.py stopped without a checkpoint at step {train_iters} (preempted?); "
                        f"re-run the sweep to resume it; see {run.directory / 'train.log'}")


def launch(script: str, run: Run, overrides: dict, log: pathlib.Path, threads: int) -> None:
    """`python deepy.py SCRIPT PROFILE... --set k=v ...` with its output in `log`."""
    command = launch_command(script, run.sweep.profile, {**overrides, "master_port": free_port()})
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        out.write(f"\n$ {shlex.join(command)}\n")
        out.flush()
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT).returncode
    if code != 0:
        raise RunFailed(f"{script} exited with code {code}; last lines of {log}:\n" + _tail(log))


def launch_command(script: str, profile: list, overrides: dict) -> list[str]:
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={_yaml_text(value)}")]
    return [sys.executable, "deepy.py", script, *profile, *sets]


def _yaml_text(value) -> str:
    """The value as `--set` reads it back (YAML): strings bare where YAML keeps them strings."""
    if isinstance(value, str) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)


def free_port() -> int:
    """A free rendezvous port, so parallel jobs (and other users' runs) never collide on 29500."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _tail(path: pathlib.Path, lines: int = 6) -> str:
    """The log's last lines, without the launcher's and libraries' noise, each cut to a readable width."""
    noise = ("[INFO]", "[WARNING]", "[ERROR] [launch.py", "warnings.warn", "UserWarning")
    kept = [line for line in path.read_text(errors="replace").splitlines() if not any(n in line for n in noise)]
    return "\n".join("    " + line[:300] for line in kept[-lines:])


def git_commit(outside=None) -> tuple[str, bool]:
    """(HEAD commit, whether tracked files differ from it), leaving out the folder `outside` (the report's
    own folder, whose figures are rewritten before the header is)."""
    def git(*argv):
        return subprocess.run(["git", *argv], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    excluded = [f":(exclude){outside}"] if outside else []
    return git("rev-parse", "HEAD") or "unknown", bool(git("status", "--porcelain", "--untracked-files=no", "--", ".",
                                                           *excluded))


class Progress:
    """Runs done / left and an ETA from the runs finished in this invocation, printed as it goes."""

    def __init__(self, total: int, jobs: int):
        self.total, self.jobs, self.done, self.skipped, self.failed = total, jobs, 0, 0, 0
        self.durations, self.started, self.lock = [], time.time(), threading.Lock()

    def finish(self, run, seconds: float | None, failed: bool = False) -> None:
        with self.lock:
            self.done += 1
            self.failed += failed
            if seconds is None:
                self.skipped += 1
            elif not failed:
                self.durations.append(seconds)
            left = self.total - self.done
            eta = (f"ETA {_duration(np.mean(self.durations) * left / self.jobs)}" if self.durations and left
                   else "ETA after the first run" if left else "all done")
            status = "FAILED" if failed else "already finished" if seconds is None else f"{_duration(seconds)}"
            print(f"[{self.done}/{self.total}] {run}: {status} | {left} left, {self.skipped} skipped, "
                  f"{self.failed} failed | elapsed {_duration(time.time() - self.started)} | {eta}", flush=True)


def _duration(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(seconds)))
