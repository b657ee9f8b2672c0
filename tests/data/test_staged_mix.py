"""The training stream of a length-schedule whose stages set train-data-weights: which path each sample of each
step comes from, against the max-error blending rule written out here in float64 (the rule megatron-core's
BlendedDataset documents); that a path drawn in several stages continues where it stopped, never repeating a
sample; a loader resumed across a mix change reads the samples of the uninterrupted one; and a training run
resumed across a mix change trains what the uninterrupted one did, its checkpoints recording the stage's mix."""
import numpy as np
import torch

from megatron.checkpoint.checkpointing import read_client_state
from megatron.data import build_data_loader, build_train_valid_test_datasets
from megatron.neox_arguments.to_length_schedule import length_schedule_of
from tests.support.data import EOD, counting_documents, data_of, make_args, write_with_megatron_core
from tests.support.training import pretrain, tiny_args

# Steps 0-2 the run's own weights [1, 1], 3-5 [1, 3], 6-7 only path 1, 8-9 the run's again (not the previous
# stage's), the window stage at 8 changing nothing of the mix.
SCHEDULE = [{"start-step": 0, "window": 8}, {"start-step": 3, "train-data-weights": [1, 3]},
            {"start-step": 6, "train-data-weights": [0, 1]}, {"start-step": 8, "window": 16}]
MIXES = [(0, 3, [1, 1]), (3, 6, [1, 3]), (6, 8, [0, 1]), (8, 10, [1, 1])]  # steps [begin, end), weights


def blend_rule(weights, samples):
    """The path of each of `samples` samples: sample i goes to the path furthest below its share,
    weight * max(i, 1) - drawn so far (the first such path on a tie)."""
    share = np.array(weights, dtype=np.float64) / np.sum(weights)
    drawn, paths = np.zeros(len(weights)), []
    for i in range(samples):
        error = share * max(i, 1) - drawn
        error[share == 0] = -np.inf  # a path of weight 0 is not in the stage's blend
        path = int(np.argmax(error))
        drawn[path] += 1
        paths.append(path)
    return paths


def two_sources(tmp_path):
    """Two datasets told apart by their tokens: path 0's are below 100, path 1's from 100 to 199."""
    return (write_with_megatron_core(tmp_path / "low", counting_documents(80, 0, 100, 4)),
            write_with_megatron_core(tmp_path / "high", counting_documents(80, 100, 200, 5)))


def source_of(item) -> int:
    text = item["tokens"][item["tokens"] != EOD]
    assert bool((text < 100).all()) or bool((text >= 100).all())  # one source per sample
    return int(text.min() >= 100)


def test_each_step_draws_from_its_stages_mix(tmp_path):
    args = make_args(tmp_path, train_data_paths=list(two_sources(tmp_path)), train_data_weights=[1, 1],
                     length_schedule=SCHEDULE)  # 10 steps of 4 samples
    train, _, _ = build_train_valid_test_datasets(*data_of(args))
    assert len(train) == 40
    want = [path for begin, end, weights in MIXES for path in blend_rule(weights, (end - begin) * 4)]
    items = [train[g] for g in range(40)]
    assert [int(item["dataset_id"]) for item in items] == want
    assert [source_of(item) for item in items] == want  # the id says where the tokens came from
    schedule = length_schedule_of(args)
    for step in range(10):  # the schedule's mix at each step is the one its samples were drawn with
        weights = next(w for begin, end, w in MIXES if begin <= step < end)
        assert list(schedule.at(step).data_weights) == weights


def test_a_path_continues_across_stages_without_repeating_a_sample(tmp_path):
    args = make_args(tmp_path, train_data_paths=list(two_sources(tmp_path)), train_data_weights=[1, 1],
                     length_schedule=SCHEDULE)
    train, _, _ = build_train_valid_test_datasets(*data_of(args))
    for path, stream in enumerate(train.datasets):
        drawn = [train[g]["tokens"] for g in range(len(train)) if int(train[g]["dataset_id"]) == path]
        # the path's k-th sample of the run is its stream's k-th, whichever stage drew it
        assert all(torch.equal(tokens, torch.as_tensor(stream[k]["tokens"])) for k, tokens in enumerate(drawn))
        assert len({tuple(tokens.tolist()) for tokens in drawn}) == len(drawn)  # none twice


def test_a_loader_resumed_across_a_mix_change_reads_the_uninterrupted_samples(tmp_path):
    args = make_args(tmp_path, train_data_paths=list(two_sources(tmp_path)), train_data_weights=[1, 1],
                     length_schedule=SCHEDULE)
    train, _, _ = build_train_valid_test_datasets(*data_of(args))
    straight = iter(build_data_loader(train, args.data_run(), 0))
    batches = [next(straight) for _ in range(10)]
    for done in (2, 5, 7):  # resumed in stage 0, 1 and 2: the batches from there on are the same
        resumed = iter(build_data_loader(train, args.data_run(), done * args.train_batch_size))
        for step in range(done, 10):
            batch = next(resumed)
            assert all(torch.equal(batch[name], batches[step][name]) for name in batch), (done, step)


def test_training_resumed_across_a_mix_change_is_the_uninterrupted_run(stdlib_data, tmp_path):
    """Two tiny runs of 6 steps through a mix change at step 2 and a length change at 4, one stopped after step 3
    and resumed: the same losses at every step, and each checkpoint records the stage's mix."""
    other = write_with_megatron_core(tmp_path / "counting", counting_documents(200, 0, 200, 6))
    schedule = [{"start-step": 0, "train-data-weights": [1, 0]},
                {"start-step": 2, "window": 16},  # the run's own mix, [1, 3]
                {"start-step": 4, "seq-length": 32, "train-data-weights": [0, 1]}]
    common = dict(data_path=None, train_data_paths=[stdlib_data, other], train_data_weights=[1, 3],
                  length_schedule=schedule, log_interval=1, train_micro_batch_size_per_gpu=4)
    straight = pretrain(tiny_args(stdlib_data, tmp_path / "straight", train_iters=6, **common))
    first = pretrain(tiny_args(stdlib_data, tmp_path / "split", train_iters=6, exit_interval=3, **common))
    assert first.preempted and first.iteration == 3
    assert read_client_state(str(tmp_path / "split" / "ckpt"), "global_step3")["length_stage"] == \
        {"stage": 1, "seq_length": 64, "window": 16, "train_data_weights": [1.0, 3.0]}
    second = pretrain(tiny_args(stdlib_data, tmp_path / "split", train_iters=6, **common))
    assert {**first.losses, **second.losses} == straight.losses
    assert read_client_state(str(tmp_path / "split" / "ckpt"), "global_step6")["length_stage"] == \
        {"stage": 2, "seq_length": 32, "window": None, "train_data_weights": [0.0, 1.0]}
