"""The training loop where it starts processes: ZeRO stages 1-3 agree with plain data parallelism (DeepSpeed's
engine, in-process), and deepy.py trains the tiny profile on one rank and on two (the GPU guide's multi-GPU
command)."""
import re

import pytest

from tests.support.training import TINY, TWO_RANKS, four_step_losses, free_port, run_script, set_flags, tiny_overrides


@pytest.mark.parametrize("zero", [{"stage": 1}, {"stage": 2}, {"stage": 3}], ids=["stage1", "stage2", "stage3"])
def test_zero_stages_match_plain_data_parallel(zero, stdlib_data, tmp_path):
    reference = four_step_losses(stdlib_data, tmp_path / "plain")
    sharded = four_step_losses(stdlib_data, tmp_path / "zero", zero_optimization=zero)
    assert list(sharded.values()) == pytest.approx(list(reference.values()), rel=1e-4)


# ------------------------------------------------------------------------- through deepy.py
@pytest.mark.parametrize("ranks", [pytest.param(1, marks=pytest.mark.slow), 2])  # 1 rank: also in-process
def test_deepy_trains_the_tiny_profile(ranks, stdlib_data, tmp_path):
    """Two ranks: the GPU guide's multi-GPU command (TWO_RANKS), with the test's corpus and folders added."""
    overrides = tiny_overrides(stdlib_data, tmp_path, train_iters=30, log_interval=10, master_port=free_port())
    command = list(TWO_RANKS) if ranks == 2 else ["deepy.py", "train.py", str(TINY), "--set", "num_gpus=1"]
    done = run_script([*command, *set_flags(overrides)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert f"{ranks} rank(s)" in done.stdout
    losses = [float(x) for x in re.findall(r"step \d+/30 \| loss ([\d.]+)", done.stdout)]
    assert len(losses) == 3 and losses[-1] < losses[0] - 0.8, done.stdout
    assert (tmp_path / "ckpt" / "latest").read_text() == "global_step30"
