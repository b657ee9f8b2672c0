"""PoSE position ids (pose-target-length, pose-chunks): the draws against the paper's sampling rule, enumerated
here exactly with fractions (chunk cuts uniform over the distinct cut sets, u_0 = 0, u_i uniform on
{u_{i-1}, .., T - L}); the positions a training step uses; reproducibility; the refused combinations."""
import itertools
import math
from collections import Counter
from fractions import Fraction

import pytest
import torch
from tests.support.training import rows_one_step_trains, tiny_args

from megatron.neox_arguments import NeoXArgsError
from megatron.training.pose_positions import draw_pose_positions


def papers_distribution(length: int, target: int, chunks: int) -> dict[tuple, Fraction]:
    """Every position vector the paper's rule can give, with its exact probability."""
    out = Counter()
    cut_sets = list(itertools.combinations(range(1, length), chunks - 1))
    room = target - length

    def skips(prefix, p):
        if len(prefix) == chunks:
            yield prefix, p
            return
        options = range(prefix[-1], room + 1)
        for u in options:
            yield from skips(prefix + [u], p / len(options))

    for cuts in cut_sets:
        for us, p in skips([0], Fraction(1)):
            starts = (0, *cuts, length)
            positions = tuple(k + us[c] for c in range(chunks) for k in range(starts[c], starts[c + 1]))
            out[positions] += p / len(cut_sets)
    return dict(out)


@pytest.mark.parametrize("length, target, chunks", [(4, 6, 2), (5, 8, 3)])
def test_draws_follow_the_papers_rule(length, target, chunks):
    exact = papers_distribution(length, target, chunks)
    assert sum(exact.values()) == 1
    torch.manual_seed(0)
    draws = 12000
    seen = Counter(tuple(draw_pose_positions(length, target, chunks, "cpu").tolist()) for _ in range(draws))
    assert set(seen) <= set(exact)  # nothing the rule cannot give
    for positions, p in exact.items():  # each frequency within 5 binomial standard deviations (float64)
        sigma = math.sqrt(float(p) * (1 - float(p)) / draws)
        assert abs(seen[positions] / draws - float(p)) < 5 * sigma + 1e-12, (positions, seen[positions], p)


def test_positions_are_chunks_of_consecutive_ids_below_the_target():
    torch.manual_seed(1)
    for _ in range(200):
        positions = draw_pose_positions(64, 256, 3, "cpu")
        assert positions.dtype == torch.long and positions.shape == (64,)
        skips = positions - torch.arange(64)
        assert int(skips[0]) == 0 and bool((skips.diff() >= 0).all())  # u_0 = 0, never shrinking
        assert len(set(skips.tolist())) <= 3 and int(positions[-1]) <= 255


def test_the_seed_fixes_the_draws():
    def draws(seed):
        torch.manual_seed(seed)
        return [draw_pose_positions(32, 128, 2, "cpu") for _ in range(5)]
    assert all(torch.equal(a, b) for a, b in zip(draws(3), draws(3)))
    assert not all(torch.equal(a, b) for a, b in zip(draws(3), draws(4)))


def test_one_step_trains_exactly_the_rows_of_the_drawn_positions(stdlib_data, tmp_path):
    """A learned position table: the rows one step changes are exactly the PoSE positions drawn for it."""
    args = tiny_args(stdlib_data, tmp_path, pos_emb="learned", max_position_embeddings=256, num_layers=1,
                     hidden_size=32, num_attention_heads=2, pose_target_length=256, pose_chunks=3,
                     train_micro_batch_size_per_gpu=2, gradient_accumulation_steps=1, warmup=0.0)
    changed, expected = rows_one_step_trains(
        args, lambda: draw_pose_positions(args.seq_length, 256, 3, "cpu").tolist())
    assert changed == expected and len(expected) == args.seq_length


@pytest.mark.parametrize("overrides, key, words", [
    ({"pose_target_length": 64}, "pose-target-length", "must be a target window T > seq-length 64"),
    ({"pose_target_length": 256, "pose_chunks": 1}, "pose-chunks", "2 or more chunks"),
    ({"pose_chunks": 3}, "pose-chunks", "pose-target-length is null"),
    ({"pose_target_length": 256, "random_positions": 256}, "pose-target-length", "both choose the training positions"),
    ({"pose_target_length": 256, "reset_attention_mask": True, "reset_position_ids": True}, "pose-target-length",
     "reset-attention-mask alone"),
    ({"pose_target_length": 512, "pos_emb": "learned", "max_position_embeddings": 256}, "pose-target-length",
     "past max-position-embeddings 256"),
])
def test_refused_settings_say_why(overrides, key, words, stdlib_data, tmp_path):
    with pytest.raises(NeoXArgsError) as err:
        tiny_args(stdlib_data, tmp_path, **overrides)
    assert f"{key}:" in str(err.value) and words in str(err.value)


def test_a_pose_run_has_its_own_identity(stdlib_data, tmp_path):
    from megatron.evaluation.labels import switch_labels, trained_parts
    args = tiny_args(stdlib_data, tmp_path, pose_target_length=256, pose_chunks=3)
    assert switch_labels(args) == ["pose256x3"] and trained_parts(args) == ["PoSE <256 (3 chunks)"]


def test_a_target_whose_distance_table_cannot_fit_is_refused_before_training():
    """PoSE positions span the target window: a distance-table method builds its table over all of it."""
    from tests.support.training import TINY

    from megatron.neox_arguments import NeoXArgs
    from megatron.run.preflight import memory_problem
    def training_memory_problem(target):
        args = NeoXArgs.from_ymls([TINY], {"pos_emb": "kerple_log", "pose_target_length": target})
        return memory_problem(args.preflight_run(), args.model, True, 257)
    message = training_memory_problem(10 ** 13)
    assert message.startswith("pose-target-length 10,000,000,000,000 (command line) cannot fit: "), message
    assert "The largest pose-target-length that fits is " in message
    assert training_memory_problem(10 ** 6) is None
