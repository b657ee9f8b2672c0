"""`sequence-parallel-size: 2` through the real entry points: `deepy.py train.py` on two ranks, each holding half
of every sequence, trains the losses one process trains, and its checkpoint resumes in one process;
`deepy.py evaluate.py` on two ranks scores every chunk as one process does."""
import json
import re

import numpy as np
import pytest

from megatron.evaluating import evaluate_run
from megatron.neox_arguments import NeoXArgs
from megatron.training import pretrain
from test_training_support import TINY, free_port, run_script, set_flags, tiny_args, tiny_overrides

COMMON = {"train_iters": 6, "log_interval": 1, "train_micro_batch_size_per_gpu": 4, "eval_interval": 1000,
          "eval_iters": 1}


@pytest.mark.launches  # two two-rank deepy.py launches (about 60 s each on a busy 2-core machine), three in-process runs
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

    # Evaluation: the one-process run's checkpoint, one window split over the two ranks, against one process.
    scoring = {"load": str(tmp_path / "one" / "ckpt"), "eval_lengths": "[64, 256]", "eval_chunks": 3,
               "eval_modes": "[nonoverlap, sliding]"}
    alone = evaluate_run(NeoXArgs.from_ymls([TINY], {**tiny_overrides(stdlib_data, tmp_path / "one"), **scoring,
                                                       "eval_lengths": [64, 256], "eval_modes": ["nonoverlap", "sliding"],
                                                       "eval_results_dir": str(tmp_path / "alone")}))
    split = run_script(["deepy.py", "evaluate.py", str(TINY), *set_flags({
        **tiny_overrides(stdlib_data, tmp_path / "one"), **scoring, "num_gpus": 2, "sequence_parallel_size": 2, "master_port": free_port(),
        "eval_results_dir": str(tmp_path / "split")})])
    assert split.returncode == 0, split.stdout[-3000:] + split.stderr[-3000:]
    one_file = json.loads(alone.read_text())
    two_file = json.loads((tmp_path / "split" / alone.name).read_text())
    assert two_file["evaluation"]["ranks"] == 2 and len(one_file["results"]) == len(two_file["results"]) == 4
    for a, b in zip(one_file["results"], two_file["results"]):
        assert (a["mode"], a["length"]) == (b["mode"], b["length"])
        np.testing.assert_allclose(b["chunk_losses"], a["chunk_losses"], rtol=1e-5)
