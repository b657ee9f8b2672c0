"""The kv-retrieval probe (megatron/probes/kv_retrieval.py) against brute force: the queried
pair once, at the requested depth; the answer recoverable by looking its key up in the prompt; keys
distinct; byte-identical prompts across runs; the one-message errors; that it fits 64 tokens; and its
mode's record (the same fields as passkey's) and heatmap."""
import re

import numpy as np
import pytest
import torch

from megatron.evaluation.context import ModeContext
from megatron.evaluation.modes import get_mode
from megatron.probes.kv_retrieval import ProbeError, fixed_tokens, make_grid, make_sample
from megatron.evaluation.retrieval.scoring import teacher_forced
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.tokenizer import ByteLevelTokenizer
from tests.support.generation import VOCAB, tiny_model
from tests.support.training import TINY
from tools.analysis.plot_probe import plot_heatmaps

TOKENIZER = ByteLevelTokenizer()
TEXT = "".join(f"def f{i}(x):\n    return x * {i % 7} + len('abc')\n" for i in range(400))  # ASCII: 1 token = 1 char
STREAM = np.array(TOKENIZER.tokenize(TEXT))
PAIR = re.compile(r" \[([a-z]{3})=(\d{4})\]")


def test_three_pairs_fit_a_64_token_sample_with_room_for_filler():
    assert fixed_tokens(TOKENIZER, 3) == 3 * len(" [abc=1234]") + len(" [abc=") + len("1234") == 43
    sample = make_sample(STREAM, TOKENIZER, 64, 0.5, (0, 64, 0, 0), pairs=3)
    assert len(sample.tokens) == 65 and sample.filler_tokens == 22


@pytest.mark.parametrize("pairs,length", [(1, 64), (3, 42), (3, 43), (3, 64), (3, 100), (3, 500), (6, 100), (6, 500)])
@pytest.mark.parametrize("depth", [0.0, 0.3, 0.5, 1.0])
def test_queried_pair_once_at_its_depth_and_the_answer_is_in_the_prompt(pairs, length, depth):
    sample = make_sample(STREAM, TOKENIZER, length, depth, (3, length, 1, 2), pairs=pairs)
    assert len(sample.tokens) == length + 1 and sample.tokens[-len(sample.answer):] == sample.answer
    prompt = TOKENIZER.detokenize(sample.prompt)
    found = list(PAIR.finditer(prompt))
    keys = [m.group(1) for m in found]
    assert len(found) == pairs and len(set(keys)) == pairs and len({m.group(2) for m in found}) == pairs
    # The question asks for one key; looking it up in the prompt gives the answer, and only there.
    asked = re.fullmatch(r".* \[([a-z]{3})=", prompt, re.S).group(1)
    (queried,) = [m for m in found if m.group(1) == asked]
    assert TOKENIZER.detokenize(sample.answer) == queried.group(2) == str(sample.key)
    assert prompt.count(f"{asked}=") == 2 and prompt.count(queried.group(2)) == 1
    assert queried.start() == sample.needle_start
    # Depth: the filler tokens before the queried pair (the other pairs taken out) are round(d * F).
    filler_before = queried.start() - sum(len(m.group(0)) for m in found if m.start() < queried.start())
    assert abs(filler_before - depth * sample.filler_tokens) <= 0.5 + 1e-9
    if depth == 0.0:
        assert queried.start() == 0
    if depth == 1.0 and sample.filler_tokens:  # with no filler at all (the shortest length) it opens the prompt
        assert queried.end() == len(prompt) - len(f" [{asked}=")
    # The rest, pairs taken out, is one contiguous slice of the evaluation stream.
    rest = PAIR.sub("", prompt[:-len(f" [{asked}=")])
    assert len(rest) == sample.filler_tokens and rest in TEXT


def test_prompts_are_identical_for_every_run_and_differ_between_seeds():
    a = make_grid(STREAM, TOKENIZER, 128, [0.0, 0.5, 1.0], 3, eval_seed=7, pairs=3)
    assert a == make_grid(STREAM, TOKENIZER, 128, [0.0, 0.5, 1.0], 3, eval_seed=7, pairs=3)
    other = make_grid(STREAM, TOKENIZER, 128, [0.0, 0.5, 1.0], 3, eval_seed=8, pairs=3)
    assert all(x.tokens != y.tokens for row, other_row in zip(a, other) for x, y in zip(row, other_row))
    assert len({s.key for row in a for s in row}) > 1


def pairs_of(sample):
    return [(m.group(1), m.group(2)) for m in PAIR.finditer(TOKENIZER.detokenize(sample.prompt))]


def test_filler_that_writes_a_key_or_a_value_is_never_used():
    for j in range(10):
        seed = (0, 100, 0, j)  # keys and values come before the filler: the same whatever the stream
        pairs = pairs_of(make_sample(STREAM, TOKENIZER, 100, 0.5, seed, pairs=3))
        written = "".join(f" {key}={value}" for key, value in pairs)  # every pair, without brackets
        stream = np.array(TOKENIZER.tokenize(TEXT[:3000] + written * 200))  # in most of the stream
        sample = make_sample(stream, TOKENIZER, 100, 0.5, seed, pairs=3)
        prompt = TOKENIZER.detokenize(sample.prompt)
        assert pairs_of(sample) == pairs
        asked = prompt[-4:-1]
        assert all(prompt.count(f"{key}=") == 1 + (key == asked) for key, _ in pairs)
        assert all(prompt.count(value) == 1 for _, value in pairs)
        with pytest.raises(ProbeError, match="too repetitive for the kv-retrieval probe"):
            make_sample(np.array(TOKENIZER.tokenize(written * 200)), TOKENIZER, 100, 0.5, seed, pairs=3)


def test_bad_input_gives_one_clear_error_each():
    with pytest.raises(ProbeError, match=r"probe-depths: every depth must be a number in \[0, 1\].*bad: \[-0.1\]"):
        make_grid(STREAM, TOKENIZER, 128, [0.5, -0.1], 1, 0, pairs=3)
    with pytest.raises(ProbeError, match=r"eval-lengths: length 41 cannot hold the kv-retrieval probe: its 3 "
                                         r"key-value pairs \(probe-kv-pairs\), question and answer take 43 .*at least 42"):
        make_sample(STREAM, TOKENIZER, 41, 0.5, (0, 41, 0, 0), pairs=3)
    with pytest.raises(ProbeError, match="probe-kv-pairs: must be an integer from 1 to 9000"):
        make_grid(STREAM, TOKENIZER, 128, [0.5], 1, 0, pairs=0)


@pytest.mark.parametrize("values,message", [
    ({"probe-kv-pairs": 0}, "probe-kv-pairs: must be an integer from 1 to 9000"),
    ({"probe-train-fraction": 0.5}, "probe-train-fraction: is 0.5, but probe-train-task is not set"),
    ({"probe-train-task": "kv-retrieval"}, "probe-train-task: is 'kv-retrieval', but probe-train-fraction is 0"),
    ({"probe-train-task": "kv-retrieval", "probe-train-fraction": 1.5}, "probe-train-fraction: must lie in [0, 1]"),
    ({"probe-train-task": "kv"}, "probe-train-task is 'kv', which is not one of ['passkey', 'kv-retrieval']"),
])
def test_bad_probe_keys_give_one_clear_error(values, message):
    with pytest.raises(NeoXArgsError) as err:
        NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, **values})
    assert message in str(err.value)


def test_both_probe_modes_write_the_same_record_fields_and_print_their_grid(capsys, tmp_path):
    model = tiny_model("rotary")
    args = NeoXArgs.from_ymls([TINY], {"probe_depths": [0.0, 1.0], "probe_samples": 2, "eval_micro_batch_size": 3})
    records = {}
    with torch.inference_mode():
        for mode, length in (("kv-retrieval", 64), ("passkey", 120)):
            context = ModeContext(model, STREAM, None, length, args.evaluation_run().settings, VOCAB, network=model, tokenizer=TOKENIZER)
            context.mode = mode
            records[mode] = get_mode(mode).score(context)
        grid = make_grid(STREAM, TOKENIZER, 64, [0.0, 1.0], 2, args.eval_seed, pairs=args.probe_kv_pairs)
        forced = teacher_forced(model, [s for row in grid for s in row], VOCAB, batch_size=4)
    kv = records["kv-retrieval"]
    assert set(kv) == set(records["passkey"])
    assert kv["probe_keys"] == [s.key for row in grid for s in row]  # the queried values, depth-major
    assert kv["probe_distance"] == [s.distance for row in grid for s in row]
    assert kv["probe_logprob"] == pytest.approx([f["logprob"] for f in forced], abs=1e-5)
    assert kv["tokens"] == 4 * 4 and len(kv["depth_accuracy"]) == 2 and len(kv["probe_greedy_exact"]) == 4
    printed = capsys.readouterr().out
    assert "kv-retrieval L=64 greedy accuracy by depth  0:" in printed and "passkey L=120 greedy accuracy" in printed
    document = {"run": {"method": "rotary", "seed": 1}, "results": [{"mode": "kv-retrieval", **kv}]}
    assert [p.suffix for p in plot_heatmaps([document], tmp_path / "heatmap", "kv-retrieval")] == [".png", ".pdf"]
    with pytest.raises(NeoXArgsError, match="has no passkey records; evaluate with `passkey` in eval-modes"):
        plot_heatmaps([document], tmp_path / "none", "passkey")


@pytest.mark.parametrize("length", [64, 300])
@pytest.mark.parametrize("depth", [0.0, 0.5, 1.0])
def test_distance_is_how_far_back_the_queried_pair_ends(length, depth):
    """What the report's far/near split reads: found by searching the prompt's text for the queried pair
    (ASCII bytes: one token per character), not from the generator's own bookkeeping."""
    sample = make_sample(STREAM, TOKENIZER, length, depth, (5, length, 0, 1), pairs=3)
    prompt = TOKENIZER.detokenize(sample.prompt)
    queried = re.search(rf" \[[a-z]{{3}}={sample.key}\]", prompt)
    assert sample.distance == len(prompt) - queried.end()
    if depth == 1.0 and length > 64:
        assert sample.distance < 3 * len(" [abc=1234]") + len(" [abc=")  # at most the other pairs and the question
