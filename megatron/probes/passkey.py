"""The passkey probe: filler from the evaluation stream, "The pass key is N. Remember it." at a chosen
depth, then the question, then the answer " N".

Everything random comes from a generator seeded by the sample's seed tuple only (common.py: sample
lengths, depths and the paired grid), so every method and training seed gets byte-identical prompts.
"""
import numpy as np

from .common import GridOptions, ProbeError, ProbeSample, check_depths, draw_filler, filler_count
from .common import check_lengths as _check_lengths
from .common import make_grid as _make_grid

__all__ = ["Options", "ProbeError", "PasskeySample", "check_depths", "check_lengths", "fixed_tokens", "make_grid",
           "make_sample"]

Options = GridOptions  # the config keys of the passkey mode: the grid's alone

NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = " What is the pass key? The pass key is"
ANSWER = " {key}"
DIGITS = 5
PIECES = "needle, question and answer"  # what takes the fixed tokens, in the eval-lengths error

PasskeySample = ProbeSample


def fixed_tokens(tokenizer, key: int = 10 ** (DIGITS - 1)) -> int:
    """Tokens of needle + question + answer (for any key of DIGITS digits with a byte-level
    tokenizer; a BPE may split other keys differently, which make_sample checks per sample)."""
    return sum(len(tokenizer.tokenize(t.format(key=key))) for t in (NEEDLE, QUESTION, ANSWER))


def make_sample(stream: np.ndarray, tokenizer, length: int, depth: float, seed: tuple) -> ProbeSample:
    """One passkey sample of `length` (+1) tokens with the needle at `depth`, from rng(seed)."""
    check_depths([depth])
    rng, key, (needle, question, answer) = _pieces(tokenizer, seed)
    filler_tokens = filler_count("passkey", PIECES, len(needle) + len(question) + len(answer), length)
    at = round(depth * filler_tokens)
    # Filler that never says the key nor the needle's words: one needle only.
    filler = draw_filler(rng, stream, tokenizer, filler_tokens, [str(key), "pass key"], "passkey", length)
    tokens = filler[:at] + needle + filler[at:] + question + answer
    return ProbeSample(tokens, answer, key, at, filler_tokens, at + len(needle))


def _pieces(tokenizer, seed: tuple):
    """(the sample's generator, its key, its needle, question and answer ids): the first draws of rng(seed)."""
    rng = np.random.default_rng(list(seed))
    key = int(rng.integers(10 ** (DIGITS - 1), 10 ** DIGITS))
    return rng, key, [tokenizer.tokenize(t.format(key=key)) for t in (NEEDLE, QUESTION, ANSWER)]


def check_lengths(stream, tokenizer, lengths, depths, samples: int, eval_seed: int) -> None:
    """Every length's grid fits, before the first length is scored (common.check_lengths)."""
    _check_lengths(lambda seed: sum(map(len, _pieces(tokenizer, seed)[2])), stream, lengths, depths, samples,
                   eval_seed, "passkey", PIECES)


def make_grid(stream, tokenizer, length: int, depths, samples: int, eval_seed: int) -> list[list[ProbeSample]]:
    """[depth][sample] passkey samples of one length; paired across runs by (eval_seed, length, i, j)."""
    return _make_grid(make_sample, stream, tokenizer, length, depths, samples, eval_seed)
