"""`length-schedule`: the stages and ramps against the rule written out here, the split of a real training batch
(tokens, labels, loss mask and positions), the window a stage puts on the model against a model configured with
that window, resume mid-schedule with PoSE on, the refused schedules, and launches through deepy.py whose
per-step scalars say the length, window, positions and tokens at chosen steps, and the data mix across a resume."""

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.support.data import counting_documents, write_with_megatron_core
from tests.support.training import TINY, run_script, set_flags, tiny_overrides

from megatron.checkpoint.checkpointing import read_client_state


def scalars_of(folder):
    tensorboard = EventAccumulator(str(folder), size_guidance={"scalars": 0})
    tensorboard.Reload()
    return lambda tag: {e.step: e.value for e in tensorboard.Scalars(tag)}


# One schedule and two launches (one stopping after step 3, one resuming) show both the lengths, windows and PoSE
# positions of each stage and the data mix across a resume: a deepy.py launch is most of each test's time.
SCHEDULE = "[{start-step: 0, seq-length: 16, window: 8, train-data-weights: [1, 0]}, " \
           "{start-step: 2, ramp: linear, steps: 2, seq-length: [32, 64]}, " \
           "{start-step: 4, window: 24, train-data-weights: [0, 1]}]"


@pytest.fixture(scope="module")
def scheduled(stdlib_data, tmp_path_factory):
    """Two train-data-paths, the run's train-data-weights [1, 1], PoSE to 256 positions, 4 samples of 64 tokens a
    step: launched through deepy.py to stop after step 3 (exit-interval), then launched again to resume."""
    folder = tmp_path_factory.mktemp("length_schedule")
    other = write_with_megatron_core(folder / "counting", counting_documents(200, 0, 200, 6))
    overrides = tiny_overrides(stdlib_data, folder, train_iters=6, log_interval=1, data_path=None,
                               train_data_paths=[stdlib_data, other], train_data_weights=[1, 1],
                               tensorboard_dir=str(folder / "tb"), train_micro_batch_size_per_gpu=4,
                               pose_target_length=256)
    command = ["deepy.py", "train.py", str(TINY), *set_flags(overrides), "--set", f"length-schedule={SCHEDULE}"]
    first = run_script(command + ["--set", "exit-interval=3"])
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    second = run_script(command)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    return folder, first.stdout, second.stdout


def test_deepy_trains_a_schedule_with_pose(scheduled):
    """The scalars of each step say the length, window, positions and tokens it trained on."""
    folder, first, second = scheduled
    assert "length schedule: step 3 is in stage 1: seq-length 32, window configured" in first
    scalar = scalars_of(folder / "tb")
    # step: (stage, seq-length, sequences per micro-batch, widest window)
    want = {1: (0, 16, 16, 8), 2: (0, 16, 16, 8), 3: (1, 32, 8, 32), 4: (1, 32, 8, 32), 5: (2, 64, 4, 24),
            6: (2, 64, 4, 24)}
    for step, (stage, length, sequences, window) in want.items():
        assert scalar("length/stage")[step] == stage
        assert scalar("length/seq_length")[step] == length
        assert scalar("length/sequences_per_micro_batch")[step] == sequences
        assert scalar("length/window")[step] == window
        assert scalar("length/tokens_per_step_per_rank")[step] == 4 * 64  # the same tokens at every length
    last = scalar("length/last_position")
    assert all(length - 1 <= last[step] <= 255 for step, (_, length, _, _) in want.items())
    assert any(last[step] > 63 for step in want)  # PoSE skipped past the longest sequence


def test_deepy_trains_through_a_mix_change_and_resumes_across_it(scheduled):
    """Only the first path for steps 1-2, the run's [1, 1] for 3-4, only the second for 5-6, across the stop after
    step 3. Each step's measured share of samples per path (a blend of [1, 1] alternates the paths, 2 of 4 samples
    each) and the checkpoints' stage records say the mix of the step's stage."""
    folder, first, second = scheduled
    assert "length schedule: step 1 is in stage 0: seq-length 16, window 8, train-data-weights [1, 0]" in first
    assert "length schedule: step 4 is in stage 1: seq-length 32, window configured, train-data-weights [1, 1]" \
        in second
    scalar = scalars_of(folder / "tb")
    shares = {1: [1, 0], 2: [1, 0], 3: [0.5, 0.5], 4: [0.5, 0.5], 5: [0, 1], 6: [0, 1]}
    for step, want in shares.items():
        assert [scalar(f"length/data_share_{path}")[step] for path in (0, 1)] == want, step
        assert [scalar(f"length/data_weight_{path}")[step] for path in (0, 1)] == want, step
    assert read_client_state(str(folder / "ckpt"), "global_step3")["length_stage"] == \
        {"stage": 1, "seq_length": 32, "window": None, "train_data_weights": [1.0, 1.0]}
    assert read_client_state(str(folder / "ckpt"), "global_step6")["length_stage"] == \
        {"stage": 2, "seq_length": 64, "window": 24, "train_data_weights": [0.0, 1.0]}
