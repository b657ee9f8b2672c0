"""`length-schedule`: the stages and ramps against the rule written out here, the split of a real training batch
(tokens, labels, loss mask and positions), the window a stage puts on the model against a model configured with
that window, resume mid-schedule with PoSE on, the refused schedules, and one launch through deepy.py whose
per-step scalars say the length, window, positions and tokens at chosen steps."""
import math
import re

import pytest
import torch
from tests.support.training import TINY, pretrain, tiny_args

from megatron.checkpoint.checkpointing import read_client_state
from megatron.data import build_train_valid_test_datasets
from megatron.data.fragments import split_into_fragments
from megatron.length_schedule import parse_schedule
from megatron.neox_arguments.to_length_schedule import length_schedule_of
from megatron.model import GPTModel
from megatron.neox_arguments import NeoXArgsError
from megatron.neox_arguments.to_model import model_config
from megatron.tokenizer import build_tokenizer


RAMP = [{"start-step": 0, "seq-length": 16, "window": 8},
        {"start-step": 3, "ramp": "linear", "steps": 10, "seq-length": [16, 64], "window": [8, 40]},
        {"start-step": 20, "window": 12}]


def expected(done: int, full: int = 64):
    """RAMP's (seq-length, window) after `done` steps, from the rule as the guide states it."""
    if done < 3:
        return 16, 8
    if done >= 20:
        return full, 12
    progress = min(done - 3, 10) / 10
    line = 16 + (64 - 16) * progress
    length = max(d for d in (1, 2, 4, 8, 16, 32, 64) if d <= line)
    return length, math.floor(8 + (40 - 8) * progress)


def test_stages_and_ramps_follow_the_rule():
    schedule = parse_schedule(RAMP, 64)
    for done in range(40):
        at = schedule.at(done)
        assert (at.seq_length, at.window) == expected(done), done
        assert at.samples_split * at.seq_length == 64
        assert at.stage == (0 if done < 3 else 1 if done < 20 else 2)


def test_dry_run_table_lists_each_span(stdlib_data, tmp_path):
    table = length_schedule_of(tiny_args(stdlib_data, tmp_path, length_schedule=RAMP, train_iters=40)).table(40, 4)
    assert table[1].split() == ["1-3", "0", "16", "8", "16", "256"]
    assert table[-1].split() == ["21-40", "2", "64", "12", "4", "256"]
    assert all(row.split()[-1] == "256" for row in table[1:] if "more rows" not in row)  # tokens stay the same
    short = length_schedule_of(tiny_args(stdlib_data, tmp_path, length_schedule=RAMP, train_iters=8))
    assert short.table(8, 4)[-1].split()[:2] == ["-", "2"] and "not reached in this run" in short.table(8, 4)[-1]
    assert short.unreached(8) == ("length schedule: stage(s) 2 start at or after train-iters 8 and are not "
                                  "reached in this run")


def test_a_real_batch_splits_into_fragments_that_keep_every_token(stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, reset_attention_mask=True, reset_position_ids=True,
                     train_micro_batch_size_per_gpu=3, data_cache_path=str(tmp_path / "cache"))
    args.join_process_group()
    train, _, _ = build_train_valid_test_datasets(args.data_run(), build_tokenizer(args.tokenizer_run()))
    crossing = []  # real samples that span a document boundary (on this corpus a few in a hundred)
    for index in range(len(train)):
        item = {k: torch.as_tensor(v) for k, v in train[index].items()}
        if int(item["document_ids"][-1]) > 0:
            crossing.append(item)
        if len(crossing) == 3:
            break
    batch = {name: torch.stack([item[name] for item in crossing]) for name in crossing[0]}
    assert set(batch) >= {"tokens", "labels", "loss_mask", "document_ids", "position_ids"}
    fragments = split_into_fragments(batch, 16)
    for name in batch:
        assert fragments[name].shape == (12, 16)
    for row in range(12):
        sample, start = divmod(row, 4)
        for name in ("tokens", "labels", "loss_mask", "document_ids"):
            assert torch.equal(fragments[name][row], batch[name][sample, 16 * start:16 * start + 16])
        positions, documents = fragments["position_ids"][row].tolist(), fragments["document_ids"][row].tolist()
        assert positions[0] == 0  # a fragment starts its positions again
        for k in range(1, 16):
            assert positions[k] == (positions[k - 1] + 1 if documents[k] == documents[k - 1] else 0)


def test_a_stage_window_is_the_model_configured_with_that_window(stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, length_schedule=[{"start-step": 0, "window": 5}])
    windowed = tiny_args(stdlib_data, tmp_path / "w", attention_window=5)
    torch.manual_seed(0)
    model = GPTModel(model_config(args, 256)).eval()
    reference = GPTModel(model_config(windowed, 256)).eval()
    reference.load_state_dict(model.state_dict())
    tokens = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        full = model(tokens)
        with length_schedule_of(args).at(0).windows_applied(model):
            capped = model(tokens)
        after = model(tokens)
        want = reference(tokens)
    assert torch.allclose(capped, want, atol=1e-6) and not torch.allclose(full, want, atol=1e-3)
    assert torch.equal(after, full)  # the configured windows come back after the step


def test_resume_mid_schedule_is_the_uninterrupted_run(stdlib_data, tmp_path):
    """PoSE draws and the schedule's stages after a resume are those of the run that never stopped."""
    schedule = [{"start-step": 0, "seq-length": 16, "window": 8}, {"start-step": 3, "seq-length": 32}]
    common = dict(length_schedule=schedule, pose_target_length=256, log_interval=1, checkpoint_factor=None,
                  train_micro_batch_size_per_gpu=4)
    straight = pretrain(tiny_args(stdlib_data, tmp_path / "straight", train_iters=6, **common))
    first = pretrain(tiny_args(stdlib_data, tmp_path / "split", train_iters=6, exit_interval=2, **common))
    assert first.preempted and first.iteration == 2
    state = read_client_state(str(tmp_path / "split" / "ckpt"), "global_step2")
    assert state["length_stage"] == {"stage": 0, "seq_length": 16, "window": 8}
    second = pretrain(tiny_args(stdlib_data, tmp_path / "split", train_iters=6, **common))
    assert {**first.losses, **second.losses} == straight.losses
    assert read_client_state(str(tmp_path / "split" / "ckpt"), "global_step6")["length_stage"] == \
        {"stage": 1, "seq_length": 32, "window": None}


@pytest.mark.parametrize("schedule, path, words", [
    ([{"start-step": 0, "seq-length": 24}], r"length-schedule\[0\]\.seq-length", "does not divide seq-length 64"),
    ([{"start-step": 0, "seq-length": 128}], r"length-schedule\[0\]\.seq-length", "longer than seq-length 64"),
    ([{"start-step": 2, "seq-length": 16}], r"length-schedule\[0\]\.start-step", "the first stage starts at 0"),
    ([{"start-step": 0, "seq-length": 16}, {"start-step": 0, "window": 8}], r"length-schedule\[1\]\.start-step",
     "not after the previous stage's 0"),
    ([{"start-step": 0, "rotary-emb-base": 500000}], r"length-schedule\[0\]\.rotary_emb_base",
     "Extend the trained model with a fine-tune of its checkpoint"),
    ([{"start-step": 0, "rotary-scaling": {"type": "linear", "factor": 4}}], r"length-schedule\[0\]\.rotary_scaling",
     "cannot change within one run"),
    ([{"start-step": 0, "dropout": 0.1}], r"length-schedule\[0\]\.dropout", "is not a stage key"),
    ([{"start-step": 0, "ramp": "linear", "steps": 4, "seq-length": 16}], r"length-schedule\[0\]\.seq-length",
     "first and the last value"),
    ([{"start-step": 0, "ramp": "cosine", "steps": 4, "window": [4, 8]}], r"length-schedule\[0\]\.ramp",
     "the ramps are linear"),
    ([{"start-step": 0, "ramp": "linear", "steps": 6, "window": [4, 8]}, {"start-step": 3, "window": 2}],
     r"length-schedule\[1\]\.start-step", "inside the previous stage's ramp"),
    ([{"start-step": 0, "steps": 6, "window": 4}], r"length-schedule\[0\]\.steps", "without a ramp"),
    ([], r"length-schedule", "give a list of stages"),
])
def test_refused_schedules_say_why(schedule, path, words, stdlib_data, tmp_path):
    with pytest.raises(NeoXArgsError) as err:
        tiny_args(stdlib_data, tmp_path, length_schedule=schedule, train_iters=8)
    assert re.search(path + ":", str(err.value)) and words in str(err.value), str(err.value)


def test_a_scheduled_run_has_its_own_identity(stdlib_data, tmp_path):
    """Evaluation groups runs by their switches: a schedule (however its keys are spelled) is one."""
    from megatron.evaluation.labels import switch_labels
    plain = switch_labels(tiny_args(stdlib_data, tmp_path))
    dashed = switch_labels(tiny_args(stdlib_data, tmp_path, length_schedule=[{"start-step": 0, "window": 8}]))
    underscored = switch_labels(tiny_args(stdlib_data, tmp_path, length_schedule=[{"start_step": 0, "window": 8}]))
    other = switch_labels(tiny_args(stdlib_data, tmp_path, length_schedule=[{"start-step": 0, "window": 9}]))
    assert plain == [] and dashed == underscored and dashed[0].startswith("lensched-") and other != dashed


def test_a_stage_window_keeps_a_smaller_layer_window(stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, layer_pattern=[{"attention-window": 4}, {"pos-emb": "alibi"}],
                     length_schedule=[{"start-step": 0, "window": 16}])
    model = GPTModel(model_config(args, 256))
    assert model.layer_windows() == [4, None]
    with length_schedule_of(args).at(0).windows_applied(model):
        assert model.layer_windows() == [4, 16]
    assert model.layer_windows() == [4, None]


@pytest.mark.parametrize("overrides, words", [
    ({"length_schedule": [{"start-step": 0, "seq-length": 16}]}, "a length-schedule that shortens the sequences"),
    ({"pose_target_length": 256}, "pose-target-length: each rank would draw its own PoSE positions"),
])
def test_sequence_parallelism_refuses_what_a_shard_cannot_do(overrides, words):
    from megatron.neox_arguments import NeoXArgs
    with pytest.raises(NeoXArgsError) as err:
        NeoXArgs.from_ymls([TINY], {"sequence_parallel_size": 2, **overrides}, 2)
    assert "sequence-parallel-size:" in str(err.value) and words in str(err.value), str(err.value)
    NeoXArgs.from_ymls([TINY], {"sequence_parallel_size": 2, "length_schedule": [{"start-step": 0, "window": 8}]}, 2)


MIXED = [{"start-step": 0, "seq-length": 16},
         {"start-step": 2, "train-data-weights": [1, 3, 0]},
         {"start-step": 4, "ramp": "linear", "steps": 4, "window": [8, 16], "train-data-weights": [0, 0, 2]},
         {"start-step": 8, "window": 32},
         {"start-step": 10, "window": 48}]


def test_a_stage_mix_holds_from_its_start_and_a_stage_without_one_draws_the_runs():
    """A stage's weights hold from its start step to the next stage (through a ramp, unchanged); a stage that
    sets none draws with the run's train-data-weights, not the previous stage's."""
    schedule = parse_schedule(MIXED, 64, data_paths=3, run_weights=(1.0, 1.0, 1.0))
    own, ramp, run = (1.0, 3.0, 0.0), (0.0, 0.0, 2.0), (1.0, 1.0, 1.0)
    want = [run, run, own, own, ramp, ramp, ramp, ramp, run, run, run, run]
    assert [schedule.at(done).data_weights for done in range(12)] == want
    assert [schedule.at(done).window for done in range(4, 9)] == [8, 10, 12, 14, 32]  # the ramp still ramps
    # the spans of one mix: stages 3 and 4 (both the run's) are one
    assert schedule.mix_spans(12) == [(0, 2, run), (2, 4, own), (4, 8, ramp), (8, 12, run)]
    assert schedule.mix_spans(3) == [(0, 2, run), (2, 3, own)]  # cut at train-iters
    at = schedule.at(5)
    assert at.describe() == "stage 2: seq-length 64, window 10, train-data-weights [0, 0, 2]"
    assert at.record() == {"stage": 2, "seq_length": 64, "window": 10, "train_data_weights": [0.0, 0.0, 2.0]}
    table = schedule.table(12, 4)
    assert table[0].split()[-1] == "train-data-weights"
    assert table[1].split() == ["1-2", "0", "16", "configured", "16", "256", "[1,", "1,", "1]"]
    assert table[3].split()[-3:] == ["[0,", "0,", "2]"]
    # without a mix in any stage, nothing about data is shown or recorded
    plain = parse_schedule(RAMP, 64, data_paths=3, run_weights=(1.0, 1.0, 1.0))
    assert plain.at(5).data_weights is None and "train_data_weights" not in plain.at(5).record()
    assert "train-data-weights" not in plain.at(5).describe() + plain.table(12, 4)[0]


def test_a_steps_scalars_give_each_paths_weight_and_measured_share():
    from megatron.length_schedule import step_scalars
    at = parse_schedule(MIXED, 64, data_paths=3, run_weights=(1.0, 1.0, 1.0)).at(2)
    scalars = step_scalars({"length": at, "seq_length": 64, "sequences": 4, "window": 64, "tokens": 256,
                            "last_position": 63, "sources": [1, 3, 0]})
    assert [scalars[f"length/data_weight_{p}"] for p in range(3)] == [0.25, 0.75, 0.0]
    assert [scalars[f"length/data_share_{p}"] for p in range(3)] == [0.25, 0.75, 0.0]


@pytest.mark.parametrize("weights, paths, words", [
    ([1, 1], 0, "the run has no train-data-paths"),
    ([1, 2, 3], 2, "has 3 weight(s) for 2 train-data-paths"),
    ([1, -1], 2, "a weight cannot be negative"),
    ([0, 0], 2, "every weight is 0"),
    ([1, float("nan")], 2, "give one number per entry of train-data-paths"),
    ([1, True], 2, "give one number per entry of train-data-paths"),
    ([1e308, 1e308], 2, "whose sum is not a finite number"),
    ("1,3", 2, "give one number per entry of train-data-paths"),
    ([2], 1, "the run has one train-data-path"),
])
def test_refused_stage_mixes_say_why(weights, paths, words):
    from megatron.length_schedule import LengthScheduleError
    with pytest.raises(LengthScheduleError) as err:
        parse_schedule([{"start-step": 0, "window": 8}, {"start-step": 3, "train-data-weights": weights}], 64,
                       data_paths=paths)
    assert err.value.path == "length_schedule[1].train-data-weights" and words in err.value.message, err.value.message
    parse_schedule([{"start-step": 0, "train-data-weights": [1] * max(paths, 1)}], 64, data_paths=max(paths, 1))


def test_a_ramp_stage_refuses_a_ramped_mix_and_a_config_checks_the_mix(stdlib_data, tmp_path):
    from megatron.length_schedule import LengthScheduleError
    with pytest.raises(LengthScheduleError) as err:
        parse_schedule([{"start-step": 0, "ramp": "linear", "steps": 4, "window": [4, 8],
                         "train-data-weights": [[1, 0], [0, 1]]}], 64, data_paths=2)
    assert "a mix does not ramp" in err.value.message
    with pytest.raises(NeoXArgsError) as err:  # data-path: no train-data-paths to weigh
        tiny_args(stdlib_data, tmp_path, length_schedule=[{"start-step": 0, "train-data-weights": [1, 1]}])
    assert "length-schedule[0].train-data-weights: is set, but the run has no train-data-paths" in str(err.value)
    with pytest.raises(NeoXArgsError) as err:
        tiny_args(stdlib_data, tmp_path, data_path=None, train_data_paths=[stdlib_data, stdlib_data],
                  length_schedule=[{"start-step": 0, "train-data-weights": [1]}])
    assert "length-schedule[0].train-data-weights: has 1 weight(s) for 2 train-data-paths" in str(err.value)
