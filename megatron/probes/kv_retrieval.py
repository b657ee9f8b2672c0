"""The kv-retrieval probe: filler with `pairs` key-value pairs written ` [abc=1234]` in it, then the
question ` [abc=` for one of them and the answer `1234`.

It is compact so that it fits the training samples of small models: 3 pairs, the question and the
answer take 43 byte-level tokens, so a 64-token sample still holds 22 of filler. The queried pair sits
at the requested depth (after round(d * F) of the F filler tokens, as passkey's needle); the other
pairs sit at random filler positions other than its own, so depth 0 still opens the prompt with it and
depth 1 still ends right before the question (at the shortest length, with no filler, it opens it).
Keys (3 lowercase letters) are distinct within a sample, and so are values (4 digits), so no other
pair's value is also a right answer. Seeding and pairing as every probe (common.py).
"""
import string
from dataclasses import dataclass

import numpy as np

from megatron.model.positional_embeddings.base import option
from megatron.quoting import quote

from .common import GridOptions, ProbeError, ProbeSample, check_depths, draw_filler, filler_count
from .common import check_lengths as _check_lengths
from .common import make_grid as _make_grid

__all__ = ["DEFAULT_PAIRS", "Options", "ProbeError", "check_lengths", "check_pairs", "pairs_problem", "fixed_tokens",
           "make_grid", "make_sample"]

PAIR = " [{key}={value}]"
QUESTION = " [{key}="
# The answer is the value alone, not "1234]": the scored tokens are then exactly what was retrieved,
# and the closing bracket (predictable from the format) does not dilute its log-probability or rank.
ANSWER = "{value}"
LETTERS, DIGITS = 3, 4
MOST_PAIRS = 9 * 10 ** (DIGITS - 1)  # distinct values of DIGITS digits (fewer than distinct keys)
DEFAULT_PAIRS = 3  # probe-kv-pairs' default, also the training mix's (megatron/data/probe_mix.py)


def fixed_tokens(tokenizer, pairs: int) -> int:
    """Tokens of the pairs + question + answer (exact with a byte-level tokenizer; a BPE may split
    other keys and values differently, which make_sample checks per sample)."""
    key, value = "a" * LETTERS, 10 ** (DIGITS - 1)
    return (pairs * len(tokenizer.tokenize(PAIR.format(key=key, value=value)))
            + len(tokenizer.tokenize(QUESTION.format(key=key))) + len(tokenizer.tokenize(ANSWER.format(value=value))))


def pairs_problem(pairs) -> str | None:
    """What is wrong with a probe-kv-pairs value (the config's check and make_sample's), or None."""
    if isinstance(pairs, bool) or not isinstance(pairs, int) or not 1 <= pairs <= MOST_PAIRS:
        return (f"must be an integer from 1 to {MOST_PAIRS} (the key-value pairs in each kv-retrieval prompt, "
                f"one of them queried), got {quote(pairs)}.")
    return None


@dataclass
class Options(GridOptions):
    probe_kv_pairs: int = option(DEFAULT_PAIRS, "`kv-retrieval`: key-value pairs ` [abc=1234]` per prompt, one of "
                                 "them queried (11 byte-level tokens each). A training mix uses probe-train-kv-pairs.",
                                 check=pairs_problem)


def check_pairs(pairs) -> None:
    if problem := pairs_problem(pairs):
        raise ProbeError(f"probe-kv-pairs: {problem}")


def make_sample(stream: np.ndarray, tokenizer, length: int, depth: float, seed: tuple, pairs: int) -> ProbeSample:
    """One kv-retrieval sample of `length` (+1) tokens, the queried pair at `depth`, from rng(seed).
    Its `key` is the queried value (what the answer says)."""
    check_depths([depth])
    check_pairs(pairs)
    rng, keys, values, needles, question, answer = _pieces(tokenizer, seed, pairs)
    filler_tokens = filler_count("kv-retrieval", _pieces_named(pairs),
                                 sum(map(len, needles)) + len(question) + len(answer), length)
    at = round(depth * filler_tokens)
    slots = rng.integers(0, max(filler_tokens, 1), size=pairs - 1)
    slots += slots >= at  # the other pairs' slots in 0..F, skipping the queried pair's own
    # Filler in which no key is followed by "=" and no value appears: one answer only, the pairs'.
    forbidden = [f"{k}=" for k in keys] + [str(v) for v in values]
    filler = draw_filler(rng, stream, tokenizer, filler_tokens, forbidden, "kv-retrieval", length)
    tokens, done, needle_start = [], 0, None
    for slot, index in sorted([(at, 0)] + [(int(s), i + 1) for i, s in enumerate(slots)]):
        tokens += filler[done:slot]
        done = slot
        if index == 0:
            needle_start = len(tokens)
        tokens += needles[index]
    tokens += filler[done:] + question + answer
    return ProbeSample(tokens, answer, values[0], needle_start, filler_tokens, needle_start + len(needles[0]))


def _pieces(tokenizer, seed: tuple, pairs: int):
    """(the sample's generator, its keys and values, the pairs', question's and answer's ids): the first
    draws of rng(seed); the first pair is the queried one."""
    rng = np.random.default_rng(list(seed))
    codes = rng.choice(26 ** LETTERS, size=pairs, replace=False)  # distinct keys; the first is queried
    keys = ["".join(string.ascii_lowercase[c // 26 ** p % 26] for p in reversed(range(LETTERS))) for c in codes]
    values = [int(v) + 10 ** (DIGITS - 1) for v in rng.choice(MOST_PAIRS, size=pairs, replace=False)]
    needles = [tokenizer.tokenize(PAIR.format(key=k, value=v)) for k, v in zip(keys, values)]
    question = tokenizer.tokenize(QUESTION.format(key=keys[0]))
    answer = tokenizer.tokenize(ANSWER.format(value=values[0]))
    return rng, keys, values, needles, question, answer


def _pieces_named(pairs: int) -> str:
    """What takes the fixed tokens, in the eval-lengths error."""
    return f"{pairs} key-value pairs (probe-kv-pairs), question and answer"


def check_lengths(stream, tokenizer, lengths, depths, samples: int, eval_seed: int, pairs: int) -> None:
    """Every length's grid fits, before the first length is scored (common.check_lengths)."""
    check_pairs(pairs)

    def fixed(seed):
        _, _, _, needles, question, answer = _pieces(tokenizer, seed, pairs)
        return sum(map(len, needles)) + len(question) + len(answer)
    _check_lengths(fixed, stream, lengths, depths, samples, eval_seed, "kv-retrieval", _pieces_named(pairs))


def make_grid(stream, tokenizer, length: int, depths, samples: int, eval_seed: int,
              pairs: int) -> list[list[ProbeSample]]:
    """[depth][sample] kv-retrieval samples of one length; paired across runs by (eval_seed, length, i, j)."""
    check_pairs(pairs)
    return _make_grid(make_sample, stream, tokenizer, length, depths, samples, eval_seed, pairs=pairs)

