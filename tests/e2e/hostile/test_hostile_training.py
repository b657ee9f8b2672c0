"""Hostile inputs, round 2 (issue 24), through the entry points where the exit status is the point: a diverged run
makes deepy.py exit non-zero, and a real full disk mid-save fails the run with one paragraph and leaves a
checkpoint the next run resumes from (each rule in-process: tests/hostile/test_hostile_training.py)."""
import subprocess
import sys

import pytest

from tests.support.hostile import BLOWN_UP_LR, full_disk, saved  # noqa: F401 (full_disk: a fixture, a 3 MB tmpfs, root only)
from tests.support.training import REPO_ROOT, TINY, child_environment, free_port, set_flags, tiny_overrides


def test_deepy_exits_non_zero_for_a_diverged_run(stdlib_data, tmp_path):
    overrides = tiny_overrides(stdlib_data, tmp_path, train_iters=3, checkpoint_factor=1, num_gpus=1,
                               master_port=free_port(), **BLOWN_UP_LR)
    done = subprocess.run([sys.executable, "deepy.py", "train.py", str(TINY), *set_flags(overrides)], cwd=REPO_ROOT,
                          env=child_environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]  # a sweep counts it as failed
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "training diverged: the weights after step 1" in errors[0], done.stderr[-3000:]
    assert saved(tmp_path) == []


def test_a_real_full_disk_mid_save_and_the_resume(full_disk, stdlib_data, tmp_path):
    def train(**overrides):
        values = tiny_overrides(stdlib_data, full_disk, **{"train_iters": 4, "checkpoint_factor": 2, **overrides})
        return subprocess.run([sys.executable, "train.py", str(TINY), *set_flags(values)], cwd=REPO_ROOT,
                              env=child_environment(), capture_output=True, text=True, timeout=300)

    done = train()
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr and "unexpected pos" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    ckpt = full_disk / "ckpt"
    assert len(errors) == 1 and errors[0].startswith(
        f"error: checkpoint step 4 could not be saved in {ckpt}: no space left on device (writing "), errors
    assert saved(full_disk) == ["global_step2", "latest"]

    # A save killed mid-write (kill -9) leaves its hidden folder, here holding what space was left.
    partial = ckpt / ".global_step4.partial"
    partial.mkdir()
    with open(partial / "mp_rank_00_model_states.pt", "wb") as f, pytest.raises(OSError):
        while True:
            f.write(b"\0" * 65536)
            f.flush()
    done = train(train_iters=2)  # resumes (at its last step): the start-up checks find the disk writable
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "no checkpoint" not in done.stdout and saved(full_disk) == ["global_step2", "latest"]
