"""`length-schedule`: the stages and ramps against the rule written out here, the split of a real training batch
(tokens, labels, loss mask and positions), the window a stage puts on the model against a model configured with
that window, resume mid-schedule with PoSE on, the refused schedules, and one launch through deepy.py whose
per-step scalars say the length, window, positions and tokens at chosen steps."""

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
from tests.support.training import TINY, run_script, set_flags, tiny_overrides


def test_deepy_trains_a_schedule_with_pose(stdlib_data, tmp_path):
    """One tiny launch: the scalars of each step say the length, window, positions and tokens it trained on."""
    schedule = "[{start-step: 0, seq-length: 16, window: 8}, {start-step: 2, ramp: linear, steps: 2, " \
               "seq-length: [32, 64]}, {start-step: 4, window: 24}]"
    overrides = tiny_overrides(stdlib_data, tmp_path, train_iters=6, log_interval=1, tensorboard_dir=str(tmp_path / "tb"),
                               train_micro_batch_size_per_gpu=4, pose_target_length=256)
    done = run_script(["deepy.py", "train.py", str(TINY), *set_flags(overrides), "--set", f"length-schedule={schedule}"])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "length schedule: step 3 is in stage 1: seq-length 32, window configured" in done.stdout
    tensorboard = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    tensorboard.Reload()
    scalar = lambda tag: {e.step: e.value for e in tensorboard.Scalars(tag)}  # noqa: E731
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


