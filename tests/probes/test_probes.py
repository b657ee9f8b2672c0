"""The passkey probe (megatron/probes): the generator against brute force (one needle, at
the requested depth, the answer recoverable from the prompt, byte-identical prompts across runs) and
the scorers against per-prefix forwards and step-by-step greedy decoding; the config's errors."""
import numpy as np
import pytest
import torch

from megatron.probes.passkey import PasskeySample, ProbeError, fixed_tokens, make_grid, make_sample
from megatron.evaluation.retrieval.scoring import greedy_exact, teacher_forced
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.tokenizer import ByteLevelTokenizer
from tests.support.generation import VOCAB, tiny_model

TOKENIZER = ByteLevelTokenizer()
TEXT = "".join(f"def f{i}(x):\n    return x * {i % 7} + len('abc')\n" for i in range(400))
STREAM = np.array(TOKENIZER.tokenize(TEXT))


def occurrences(tokens, piece):
    return [i for i in range(len(tokens) - len(piece) + 1) if tokens[i:i + len(piece)] == piece]


@pytest.mark.parametrize("length", [fixed_tokens(TOKENIZER) - 1, 128, 300, 1000])
@pytest.mark.parametrize("depth", [0.0, 0.1, 0.5, 0.9, 1.0])
def test_one_needle_at_the_requested_depth_and_the_answer_is_in_the_prompt(length, depth):
    sample = make_sample(STREAM, TOKENIZER, length, depth, (0, length, 1, 2))
    key = sample.key
    needle = TOKENIZER.tokenize(f" The pass key is {key}. Remember it. {key} is the pass key. ")
    assert len(sample.tokens) == length + 1
    assert occurrences(sample.tokens, needle) == [sample.needle_start]
    filler = sample.filler_tokens
    assert filler == 0 or abs(sample.needle_start / filler - depth) <= 0.5 / filler + 1e-9  # nearest slot
    prompt = TOKENIZER.detokenize(sample.prompt)
    assert prompt.count(str(key)) == 2 and prompt.endswith("What is the pass key? The pass key is")
    assert prompt.count("pass key") == 4  # two in the needle, two in the question: no other mention
    assert TOKENIZER.detokenize(sample.answer) == f" {key}" and sample.tokens[-len(sample.answer):] == sample.answer
    # The rest is one contiguous slice of the evaluation stream.
    rest = sample.tokens[:sample.needle_start] + sample.tokens[sample.needle_start + len(needle):][:filler - sample.needle_start]
    assert filler == 0 or occurrences(STREAM.tolist(), rest)


def test_prompts_are_identical_for_every_run_and_differ_between_cells():
    a = make_grid(STREAM, TOKENIZER, 256, [0.0, 0.5, 1.0], 3, eval_seed=7)
    b = make_grid(STREAM, TOKENIZER, 256, [0.0, 0.5, 1.0], 3, eval_seed=7)
    assert a == b
    keys = [s.key for row in a for s in row]
    assert len(set(keys)) > 1 and [s.key for s in a[0]] != [s.key for s in make_grid(STREAM, TOKENIZER, 256, [0.0], 3, 8)[0]]


def test_filler_that_mentions_the_key_phrase_is_never_used():
    text = TEXT[:3000] + "the pass key is here " * 200  # half the stream mentions it
    stream = np.array(TOKENIZER.tokenize(text))
    for j in range(30):
        sample = make_sample(stream, TOKENIZER, 150, 0.5, (0, 150, 0, j))
        assert TOKENIZER.detokenize(sample.prompt).count("pass key") == 4
    with pytest.raises(ProbeError, match="too repetitive"):
        make_sample(np.array(TOKENIZER.tokenize("pass key " * 500)), TOKENIZER, 150, 0.5, (0, 150, 0, 0))


def test_bad_depth_and_too_short_length_give_one_clear_error_each():
    with pytest.raises(ProbeError, match=r"probe-depths: every depth must be a number in \[0, 1\].*bad: \[1.5\]"):
        make_grid(STREAM, TOKENIZER, 256, [0.5, 1.5], 1, 0)
    shortest = fixed_tokens(TOKENIZER) - 1
    with pytest.raises(ProbeError, match=f"eval-lengths: length 64 cannot hold the passkey probe.*at least {shortest}"):
        make_sample(STREAM, TOKENIZER, 64, 0.5, (0, 64, 0, 0))


@pytest.mark.parametrize("values,message", [
    ({"probe-depths": [0.0, -0.25]}, "probe-depths: must be a non-empty list of numbers in [0, 1]"),
    ({"probe-depths": []}, "probe-depths: must be a non-empty list of numbers in [0, 1]"),
    ({"probe-samples": 0}, "probe-samples: must be a positive integer, got 0."),
])
def test_bad_probe_keys_give_one_clear_error(values, message):
    with pytest.raises(NeoXArgsError) as err:
        NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, **values})
    assert message in str(err.value)


def test_teacher_forced_scores_match_one_forward_per_answer_prefix():
    model = tiny_model("rotary")
    samples = [s for row in make_grid(STREAM, TOKENIZER, 120, [0.0, 1.0], 2, 0) for s in row]
    with torch.inference_mode():
        got = teacher_forced(model, samples, VOCAB, batch_size=3)
        for sample, scored in zip(samples, got):
            logprob, ranks, start = 0.0, [], len(sample.tokens) - len(sample.answer)
            for k, token in enumerate(sample.answer):
                scores = model(torch.tensor([sample.tokens[:start + k]]))[0, -1, :VOCAB].float().log_softmax(-1)
                logprob += float(scores[token])
                ranks.append(int((scores.argsort(descending=True) == token).nonzero()))  # ties: none here
            assert scored["logprob"] == pytest.approx(logprob, abs=1e-4)
            assert scored["rank"] == pytest.approx(np.mean(ranks)) and scored["top1"] == (max(ranks) == 0)


@pytest.mark.parametrize("recompute", [False, True])
def test_greedy_exact_match_against_step_by_step_argmax(recompute):
    model = tiny_model("rotary")
    samples = [s for row in make_grid(STREAM, TOKENIZER, 120, [0.5], 3, 0) for s in row]
    with torch.inference_mode():
        decoded = []
        for sample in samples:  # brute force: a full forward per new token
            tokens = list(sample.prompt)
            for _ in sample.answer:
                tokens.append(int(model(torch.tensor([tokens]))[0, -1, :VOCAB].argmax()))
            decoded.append(tokens[len(sample.prompt):])
    # The model's own continuation is the "answer" of the first two: exact; the real key of the last.
    rigged = [PasskeySample(s.prompt + d, d, s.key, s.needle_start, s.filler_tokens, s.needle_end) for s, d in zip(samples[:2], decoded)]
    got = greedy_exact(model, rigged + samples[2:], VOCAB, batch_size=2, recompute=recompute)
    assert got == [True, True, decoded[2] == samples[2].answer]
