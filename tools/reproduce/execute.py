"""Running the grid: each run trains (`deepy.py train.py`) and evaluates (`deepy.py evaluate.py`) in its
own subprocess, `jobs` at a time, with progress and an ETA; one failed run never stops the others, but
SIGINT/SIGTERM to the sweep stops it: the running deepy.py processes get SIGTERM (their ranks save and
exit), no further run starts, and `SweepInterrupted` says which runs were cut short. A `kill -KILL` of the
sweep reaches deepy.py through the kernel (PR_SET_PDEATHSIG), so nothing trains on as an orphan."""
import concurrent.futures
import ctypes
import ctypes.util
import datetime
import json
import os
import pathlib
import shlex
import signal
import socket
import subprocess
import sys
import threading
import time

import numpy as np

from megatron.errors import NeoXArgsError
from . import REPO_ROOT
from .runs import (Run, RunFailed, check_training_config, extended_config, finished_result, finished_ruler, set_text,
                   trained_step)


STOP_SECONDS = 120  # how long an interrupted run may take to save and exit before deepy.py is killed


class SweepInterrupted(Exception):
    """The user stopped the sweep (SIGINT/SIGTERM): `signum`, and the runs that were cut short."""

    def __init__(self, signum: int, runs: list[str]):
        self.signum, self.runs = signum, runs
        name = signal.Signals(signum).name
        cut = f"interrupted {', '.join(runs)}" if runs else "no run was in progress"
        super().__init__(f"the sweep stopped on {name}: {cut}; no further run was started. Re-run the same command "
                         f"to resume: finished runs are skipped, a run stopped in train.py continues from the "
                         f"checkpoint it saved on the way out, one stopped in evaluate.py is evaluated again. "
                         f"Exit status {128 + signum} = 128 + {name}.")


class _Stop:
    """The sweep's SIGINT/SIGTERM: remembered, and passed on as SIGTERM to every running deepy.py (started
    in its own session, so the terminal's Ctrl-C reaches it only this way, once). Workers register their
    child before checking `signum`, and the handler sets `signum` before looking at the children, so a
    child started as the signal arrives is signalled by one or the other."""

    def __init__(self):
        self.signum, self.at, self.children, self.interrupted = None, None, {}, []

    def handle(self, signum, _frame):
        if self.signum is not None:  # a second Ctrl-C: the first one is already being carried out
            return
        self.signum, self.at = signum, time.time()
        running = list(self.children.items())
        print(f"\n{signal.Signals(signum).name}: stopping the sweep; SIGTERM passed on to "
              f"{', '.join(str(run) for _, run in running) or 'no running run'} (waiting up to {STOP_SECONDS} s "
              "for it to save and exit)", flush=True)
        for child, _ in running:
            _terminate(child)

    def start(self, child: subprocess.Popen, run: Run) -> None:
        self.children[child] = run
        if self.signum is not None:
            _terminate(child)


def _terminate(child: subprocess.Popen) -> None:
    try:
        child.send_signal(signal.SIGTERM)
    except ProcessLookupError:
        pass


_STOP = _Stop()  # one sweep per process; run_grid resets it


def run_grid(runs: list[Run], jobs: int, threads: int) -> dict:
    """Every run through `execute`, `jobs` at a time; returns {run: error}, or raises SweepInterrupted
    after SIGINT/SIGTERM once the running runs have stopped. An evaluation-only run follows its base run,
    and an extension the run it extends, in the same worker, so no worker waits idle for another's checkpoint."""
    global _STOP
    _STOP = stop = _Stop()
    progress, failures = Progress(len(runs), jobs), {}
    follows = {}
    for run in runs:
        if run.after:
            follows.setdefault(id(run.after), []).append(run)
    print(f"{len(runs)} runs, {jobs} at a time, {threads} thread(s) each", flush=True)

    def one(run):
        if stop.signum is not None:  # stopped by the user: no new run starts
            return
        try:
            progress.finish(run, execute(run, threads))
        except _Stopped as stopped:
            stop.interrupted.append(f"{run} (in {stopped})")
            return
        except Exception as err:  # noqa: BLE001 - whatever stops one run, the others go on
            failures[str(run)] = str(err) if isinstance(err, (RunFailed, NeoXArgsError)) else repr(err)
            print(f"FAILED {run}: {failures[str(run)]}", flush=True)
            progress.finish(run, 0.0, failed=True)
        for follow in follows.get(id(run), []):
            if str(run) in failures:
                failures[str(follow)] = (f"not trained: the run it extends, {run}, failed" if follow.extends else
                                         f"not evaluated: its base run {run} failed")
                progress.finish(follow, 0.0, failed=True)
            else:
                one(follow)

    previous = {s: signal.signal(s, stop.handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(one, run) for run in runs if not run.after]:
                future.result()  # waits in the main thread, where the handler runs
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if stop.signum is not None:
        raise SweepInterrupted(stop.signum, stop.interrupted)
    return failures


class _Stopped(Exception):
    """A run's deepy.py ended after the sweep was told to stop: not a failure of the run."""


def execute(run: Run, threads: int) -> float | None:
    """Train (unless a base run's checkpoint is reused) and evaluate one run; None when already finished."""
    args = run.args()
    digest = check_training_config(run)
    # evaluate.py's result stands only when no training comes first; eval.py's RULER may be all that is left
    scored = bool(finished_result(run, args.train_iters)) and (run.base is not None
                                                               or trained_step(run) == args.train_iters)
    if scored and (not run.sweep.ruler or finished_ruler(run, args.train_iters)):
        return None
    began = time.time()
    # An extension starts from its base's final checkpoint; once it has its own, it resumes from that.
    if run.extends and trained_step(run) is None and trained_step(run.extends) != run.extends.args().train_iters:
        raise RunFailed(f"the run it extends, {run.extends}, has no checkpoint at step "
                        f"{run.extends.args().train_iters} to start from")
    if not run.base:
        train(run, args.train_iters, digest, threads)
    elif trained_step(run.base) != args.train_iters:
        raise RunFailed(f"its base run {run.base} has no checkpoint at step {args.train_iters}")
    if not scored:
        for stale in run.results_dir.glob("*.json"):  # one result file per run: a new checkpoint replaces the old
            stale.unlink()
        launch("evaluate.py", run, run.evaluation_overrides(), run.directory / "evaluate.log", threads)
        if not finished_result(run, args.train_iters):
            raise RunFailed(f"evaluate.py finished but {run.results_dir} holds no complete result for step "
                            f"{args.train_iters}; see {run.directory / 'evaluate.log'}")
    if run.sweep.ruler and not (scored and finished_ruler(run, args.train_iters)):
        for stale in run.ruler_dir.glob("*.json"):  # eval.py merges only into a file of the same checkpoint
            stale.unlink()
        launch("eval.py", run, run.ruler_overrides(), run.directory / "ruler.log", threads)
        if not finished_ruler(run, args.train_iters):
            raise RunFailed(f"eval.py finished but {run.ruler_dir} holds no RULER result of every task at every "
                            f"length for step {args.train_iters}; see {run.directory / 'ruler.log'}")
    return time.time() - began


def train(run: Run, train_iters: int, digest: str, threads: int) -> None:
    step = trained_step(run)
    if step == train_iters:
        return
    if step is not None and step > train_iters:
        raise RunFailed(f"{run.checkpoints} has a checkpoint at step {step}, past train-iters "
                        f"{train_iters}; delete the run folder or raise train-iters")
    run.directory.mkdir(parents=True, exist_ok=True)
    stamp = {"config_hash": digest, "commit": git_commit()[0], **({"extends": extended_config(run)} if run.extends else {})}
    (run.directory / "training_config.json").write_text(json.dumps(stamp))
    launch("train.py", run, run.training_overrides(), run.directory / "train.log", threads)
    if trained_step(run) != train_iters:
        raise RunFailed(f"train.py stopped without a checkpoint at step {train_iters} (preempted?); "
                        f"re-run the sweep to resume it; see {run.directory / 'train.log'}")


def launch(script: str, run: Run, overrides: dict, log: pathlib.Path, threads: int) -> None:
    """`python deepy.py SCRIPT PROFILE... --set k=v ...` with its output in `log`."""
    if _STOP.signum is not None:  # stopped between this run's training and its evaluation
        raise _Stopped(script)
    command = launch_command(script, run.sweep.profile, {**overrides, "master_port": free_port()})
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        out.write(f"\n$ {shlex.join(command)}\n")
        out.flush()
        start = out.tell()  # this launch's part of the log: earlier attempts' errors are not its reason
        # Its own session: the terminal's Ctrl-C goes to the sweep alone, which passes SIGTERM on (_Stop).
        child = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT,
                                 start_new_session=True, preexec_fn=_die_with_parent(os.getpid()))
        _STOP.start(child, run)
        try:
            code = _wait(child, run)
        finally:
            _STOP.children.pop(child, None)
    if _STOP.signum is not None:
        raise _Stopped(script)
    if code != 0:
        raise RunFailed(f"{script} exited with code {code}; " + failure_summary(_read_from(log, start), log))


def _wait(child: subprocess.Popen, run: Run) -> int:
    """The child's status; after the sweep was stopped, at most STOP_SECONDS more, then deepy.py is killed
    (its ranks notice their launcher is gone and save and exit: megatron/run/launcher_watch.py)."""
    killed = False
    while True:
        try:
            return child.wait(timeout=1.0)
        except subprocess.TimeoutExpired:
            if not killed and _STOP.at is not None and time.time() - _STOP.at > STOP_SECONDS:
                killed = True
                print(f"{run}: deepy.py still running {STOP_SECONDS} s after SIGTERM; killing it (its ranks stop "
                      "on their own when it is gone)", flush=True)
                child.kill()


_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True) if sys.platform == "linux" else None
_PR_SET_PDEATHSIG = 1


def _die_with_parent(parent: int):
    """For `preexec_fn`: the kernel sends the child SIGTERM when the sweep dies, even by SIGKILL, which no
    handler sees; deepy.py turns it into a clean stop of every rank. Bound before the fork, so the child
    only makes the system call. (PDEATHSIG follows the thread that forked: the worker thread waits for the
    child, so it outlives it.) Linux only: elsewhere a killed sweep's deepy.py must be stopped by hand."""
    if _LIBC is None:
        return None
    prctl, getppid = _LIBC.prctl, os.getppid

    def arm():
        if prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
            os._exit(126)  # cannot promise the child stops with the sweep: do not start it
        if getppid() != parent:  # the sweep died before the request took effect
            os._exit(143)
    return arm


def _read_from(path: pathlib.Path, offset: int) -> str:
    with open(path, "rb") as log:
        log.seek(offset)
        return log.read().decode(errors="replace")


def launch_command(script: str, profile: list, overrides: dict) -> list[str]:
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={set_text(value)}")]
    return [sys.executable, "deepy.py", script, *profile, *sets]


def free_port() -> int:
    """A free rendezvous port, so parallel jobs (and other users' runs) never collide on 29500."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


_NOISE = ("[INFO]", "[WARNING]", "[ERROR] [launch.py", "warnings.warn", "UserWarning")


def failure_summary(text: str, log: pathlib.Path, lines: int = 6) -> str:
    """Why a launch failed, from its part of the log: the paragraphs its ranks printed as `error: ...`
    first (the reason; other processes, such as an orphaned run training into the same log, may have
    written hundreds of lines after it), then the last lines, without the launcher's and libraries'
    noise, each cut to a readable width."""
    kept = [line for line in text.splitlines() if not any(n in line for n in _NOISE)]
    errors, paragraph = [], None
    for line in kept:
        if line.startswith("error:"):
            paragraph = [line]
            errors.append(paragraph)
        elif paragraph is not None and line.strip() and not line.startswith(("step ", "$ ", "deepy.py:")) \
                and len(paragraph) < 10:
            paragraph.append(line)  # the error's continuation lines
        else:
            paragraph = None
    shown = "\n".join("    " + line[:1000] for p in errors for line in p)
    tail = "\n".join("    " + line[:300] for line in kept[-lines:])
    return (f"its error:\n{shown}\nlast lines of {log}:\n{tail}" if errors else f"last lines of {log}:\n{tail}")


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
