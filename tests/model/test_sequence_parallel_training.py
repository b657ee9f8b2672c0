"""`sequence-parallel-size: 2` through the real entry point: `deepy.py train.py` on two ranks, each holding half
of every sequence, trains the losses one process trains, and its checkpoint resumes in one process."""
import re

import pytest

from megatron.training import pretrain
from test_training_support import TINY, free_port, run_script, set_flags, tiny_args, tiny_overrides

COMMON = {"train_iters": 6, "log_interval": 1, "train_micro_batch_size_per_gpu": 4, "eval_interval": 1000,
          "eval_iters": 1}


@pytest.mark.launches  # one two-rank deepy.py launch (about 60 s on a busy 2-core machine) and two in-process runs
def test_two_sequence_shards_train_as_one_process_and_their_checkpoint_resumes_in_one(stdlib_data, tmp_path):
    one = pretrain(tiny_args(stdlib_data, tmp_path / "one", **COMMON))

    overrides = tiny_overrides(stdlib_data, tmp_path / "sp", num_gpus=2, sequence_parallel_size=2, exit_interval=4,
                               master_port=free_port(), **COMMON)
    done = run_script(["deepy.py", "train.py", str(TINY), *set_flags(overrides)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "2 rank(s)" in done.stdout
    printed = {int(step): float(loss) for step, loss in re.findall(r"step (\d+)/6 \| loss ([\d.]+)", done.stdout)}
    assert sorted(printed) == [1, 2, 3, 4], done.stdout
    for step, loss in printed.items():  # printed to 4 decimals
        assert loss == pytest.approx(one.losses[step], abs=1e-4), (step, loss, one.losses[step])

    resumed = pretrain(tiny_args(stdlib_data, tmp_path / "sp", **COMMON))  # sequence-parallel-size 1 now
    assert sorted(resumed.losses) == [5, 6]
    for step in (5, 6):
        assert resumed.losses[step] == pytest.approx(one.losses[step], rel=1e-5), step
