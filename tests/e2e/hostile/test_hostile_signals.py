"""Hostile inputs, part 3: a second run on a busy save folder, and the launcher stopped by a signal or
killed outright while its rank trains. Real launches through deepy.py on DeepSpeed's CPU accelerator.
Issue 17."""
import re
import signal
import subprocess
import sys

import time

import psutil

from tests.support.hostile import assert_clear_error
from tests.support.training import REPO_ROOT, TINY, child_environment, free_port, set_flags, tiny_overrides


def start_deepy(data, folder):
    overrides = tiny_overrides(data, folder, train_iters=100_000, log_interval=1, master_port=free_port())
    process = subprocess.Popen([sys.executable, "deepy.py", "train.py", str(TINY), *set_flags(overrides)],
                               cwd=REPO_ROOT, env=child_environment(), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    seen = []
    for line in process.stdout:  # until the rank is training
        seen.append(line)
        if line.startswith("step") and " 3/100000" in line:
            return process, "".join(seen)
    raise AssertionError("deepy.py ended before training: " + "".join(seen)[-3000:])


def stopped_step(output):
    return int(re.search(r"stopping after step (\d+)", output).group(1))


def test_second_run_on_a_busy_save_folder_and_sigterm_exit_status(stdlib_data, tmp_path):
    process, output = start_deepy(stdlib_data, tmp_path)
    try:
        rival = subprocess.run([sys.executable, "train.py", str(TINY),
                                *set_flags(tiny_overrides(stdlib_data, tmp_path, train_iters=2))],
                               cwd=REPO_ROOT, env=child_environment(), capture_output=True, text=True, timeout=300)
        # The rank: not DeepSpeed's launcher processes, nor deepy.py's fork that runs DeepSpeed's runner.
        rank = [p for p in psutil.Process(process.pid).children(recursive=True)
                if "train.py" in (line := " ".join(p.cmdline())) and "deepspeed" not in line and "deepy.py" not in line]
        assert_clear_error(rival, f"save folder {tmp_path / 'ckpt'} is in use by PID {rank[0].pid}",
                           "give this run another `save`")
        assert "step 1/" not in rival.stdout
    finally:
        process.send_signal(signal.SIGTERM)
        rest, _ = process.communicate(timeout=180)
    output += rest
    step = stopped_step(output)
    assert (tmp_path / "ckpt" / "latest").read_text() == f"global_step{step}"
    # A clean stop on SIGTERM: the shell's 128 + 15, said in words (it was 241, from the runner's -15).
    assert process.returncode == 143, output[-3000:]
    assert "deepy.py: stopped by SIGTERM, passed on to every rank" in output and "Exit status 143" in output


def test_ranks_save_and_exit_when_deepy_is_killed(stdlib_data, tmp_path):
    """kill -KILL of deepy.py alone: DeepSpeed's runner and launcher would keep the rank training, and
    writing checkpoints, as orphans. The rank notices, saves and exits, and the launcher processes with it."""
    process, output = start_deepy(stdlib_data, tmp_path)
    launch = psutil.Process(process.pid).children(recursive=True)
    assert len(launch) >= 3  # runner, launcher, rank
    process.kill()
    rest, _ = process.communicate(timeout=180)  # EOF once every process holding the pipe has exited
    output += rest
    assert f"the launcher deepy.py (PID {process.pid}) is gone: stopping as on SIGTERM" in output, output[-3000:]
    step = stopped_step(output)
    assert (tmp_path / "ckpt" / "latest").read_text() == f"global_step{step}"
    deadline = time.time() + 60
    while any(map(_alive, launch)) and time.time() < deadline:
        time.sleep(0.5)
    assert not [p for p in launch if _alive(p)]


def _alive(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
