"""Run one part of the GPU check under its time limit, and at the limit stop everything it started.

subprocess.run(timeout=...) kills only the process it started. The tests part's pytest-xdist workers and the
training loop's deepy.py are that process's children: killed alone, it left them running on the GPU,
and a run of 2026-11-27 timed the evaluation part while a test worker still ran its last test there (16k
tokens at 110,588 tokens/s through the same `sdpa` path that ran at 253,221 in the next row). Each part
therefore runs in its own session (process group), and the whole group is killed at the limit. (deepy.py
starts DeepSpeed's launcher in a session of its own; its ranks stop themselves when deepy.py is gone, as
megatron/run/launcher_watch.py has them do for any launcher killed outright.)"""
import os
import signal
import subprocess
import time

from megatron.run.process_group import living_members

SETTLE_S = 10.0  # how long a killed group may take to be gone (SIGKILL is delivered, not awaited)


def run_whole_group(argv: list, timeout: float, **popen) -> int | None:
    """The exit code of `argv`, or None when it ran past `timeout` seconds; then its process group (it and the
    processes it started there) is killed, and gone, before this returns."""
    process = subprocess.Popen(argv, start_new_session=True, **popen)
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        return None
    except BaseException:  # Ctrl-C in the check: leave nothing behind either
        _kill_group(process)
        raise


def _kill_group(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended between the timeout and the kill
        pass
    process.wait()
    deadline = time.monotonic() + SETTLE_S
    while living_members(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
