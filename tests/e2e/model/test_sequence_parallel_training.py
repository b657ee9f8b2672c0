"""`sequence-parallel-size: 2` through the real entry points: `deepy.py train.py` on four ranks, two replicas each
holding half of every sequence on two ranks, resumes a one-process checkpoint and trains the losses one process
trains, and its checkpoint resumes in one process; `deepy.py evaluate.py` on two ranks scores every chunk as one
process does."""
import glob
import json

import numpy as np
import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from megatron.evaluation.driver import evaluate_run
from megatron.neox_arguments import NeoXArgs
from tests.support.training import TINY, free_port, pretrain, run_script, set_flags, tiny_args, tiny_overrides

COMMON = {"train_iters": 6, "log_interval": 1, "train_micro_batch_size_per_gpu": 4, "eval_interval": 1000,
          "eval_iters": 1}


def logged_steps(folder) -> dict[int, tuple[float, float]]:
    """step -> (loss, gradient norm) from a run's tensorboard scalars (float32). The norm is taken after the
    engine's all-reduce: a gradient averaged over the wrong ranks shows there, whereas Adam's update (and so the
    next losses) barely changes with the gradient's scale."""
    events = EventAccumulator(str(folder), size_guidance={"scalars": 0}).Reload()
    loss, norm = ({e.step: e.value for e in events.Scalars(tag)} for tag in ("train/loss", "train/grad_norm"))
    return {step: (loss[step], norm[step]) for step in loss}


def assert_same_steps(logged: dict, reference: dict, steps: list[int]) -> None:
    assert sorted(logged) == steps, logged
    for step in steps:
        assert logged[step] == pytest.approx(reference[step], rel=1e-5), (step, logged[step], reference[step])


# a four-rank and a two-rank deepy.py launch, three in-process runs
def test_two_replicas_of_two_sequence_shards_train_as_one_process_and_checkpoints_resume_both_ways(stdlib_data,
                                                                                                  tmp_path):
    """num-gpus 4, sequence-parallel-size 2: two data-parallel replicas (micro-batch 2 each), each sequence split
    over a replica's two ranks, resume a one-process checkpoint and train the losses and gradient norms of one
    process with the same global batch of 4 (DeepSpeed sums the gradients over all four ranks and divides by the
    two replicas); their checkpoint resumes in one process. Then `deepy.py evaluate.py` on two ranks, each holding
    half of every window, scores every chunk as one process does."""
    # The uninterrupted one-process run, which also keeps its step-2 checkpoint: P = 1 -> P = 2 x 2 -> P = 1.
    one = pretrain(tiny_args(stdlib_data, tmp_path / "one", extra_save_iters=[2], tensorboard_dir=str(tmp_path / "tb1"),
                             **COMMON))

    port = free_port()
    overrides = tiny_overrides(stdlib_data, tmp_path / "sp", **{**COMMON, "train_micro_batch_size_per_gpu": 2},
                               num_gpus=4, sequence_parallel_size=2, exit_interval=4,
                               load=str(tmp_path / "one" / "ckpt"), iteration=2, tensorboard_dir=str(tmp_path / "tb4"),
                               master_port=port)
    done = run_script(["deepy.py", "train.py", str(TINY), *set_flags(overrides)])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # DeepSpeed's CPU allreduce buffers (67 MB of RAM a rank in /dev/shm) are gone with the run.
    assert not glob.glob(f"/dev/shm/deepspeed_allreduce_buffer_*_{port}_*")
    assert "4 rank(s)" in done.stdout and "resumed from step 2" in done.stdout, done.stdout
    assert_same_steps(logged_steps(tmp_path / "tb4"), logged_steps(tmp_path / "tb1"), [3, 4])

    resumed = pretrain(tiny_args(stdlib_data, tmp_path / "sp", **COMMON))  # one process, micro-batch 4 again
    assert sorted(resumed.losses) == [5, 6]
    for step in (5, 6):
        assert resumed.losses[step] == pytest.approx(one.losses[step], rel=1e-5), step

    # Evaluation: the one-process run's checkpoint, one window split over the two ranks, against one process.
    scoring = {"load": str(tmp_path / "one" / "ckpt"), "eval_lengths": "[64, 256]", "eval_chunks": 3,
               "eval_modes": "[nonoverlap, sliding]"}
    alone = evaluate_run(NeoXArgs.from_ymls([TINY], {**tiny_overrides(stdlib_data, tmp_path / "one"), **scoring,
                                                       "eval_lengths": [64, 256], "eval_modes": ["nonoverlap", "sliding"],
                                                       "eval_results_dir": str(tmp_path / "alone")}).evaluation_run())
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
