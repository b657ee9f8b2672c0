"""The passkey probe: filler from the evaluation stream, "The pass key is N. Remember it." at a chosen
depth, then the question, then the answer " N".

A sample of length L is L + 1 token ids, as a chunk is (megatron/evaluation/chunks.py): a forward over
its first L scores the answer as its last targets, and greedy decoding from the prompt (all but the
answer) never feeds more than L tokens. Everything random comes from a generator seeded by (eval-seed,
L, depth index, sample index) only, so every method and training seed gets byte-identical prompts.
Depth d puts the needle after round(d * F) of the F filler tokens: 0 at the start, 1 right before the
question. The pieces are tokenized separately and joined as ids, so the needle is whole whatever the
tokenizer does at the seams.
"""
from dataclasses import dataclass

import numpy as np

from megatron.neox_arguments.errors import NeoXArgsError

NEEDLE = " The pass key is {key}. Remember it. {key} is the pass key. "
QUESTION = " What is the pass key? The pass key is"
ANSWER = " {key}"
DIGITS = 5
ATTEMPTS = 100  # filler offsets tried before giving up on one whose text does not hold the needle


class ProbeError(NeoXArgsError):
    """A probe that cannot be made as configured (a length too short, a depth outside [0, 1])."""


@dataclass(frozen=True)
class PasskeySample:
    tokens: list[int]   # L + 1 ids: prompt then answer
    answer: list[int]   # the last len(answer) of `tokens`
    key: int
    needle_start: int   # index in `tokens` where the needle's ids begin
    filler_tokens: int  # F

    @property
    def prompt(self) -> list[int]:
        return self.tokens[:len(self.tokens) - len(self.answer)]


def fixed_tokens(tokenizer, key: int = 10 ** (DIGITS - 1)) -> int:
    """Tokens of needle + question + answer (for any key of DIGITS digits with a byte-level
    tokenizer; a BPE may split other keys differently, which make_sample checks per sample)."""
    return sum(len(tokenizer.tokenize(t.format(key=key))) for t in (NEEDLE, QUESTION, ANSWER))


def check_depths(depths) -> None:
    bad = [d for d in depths if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 1]
    if bad or not depths:
        raise ProbeError(f"probe-depths: every depth must be a number in [0, 1] (0: the needle opens the "
                         f"prompt, 1: it ends right before the question), got {list(depths)}; bad: {bad}.")


def make_sample(stream: np.ndarray, tokenizer, length: int, depth: float, seed: tuple) -> PasskeySample:
    """One passkey sample of `length` (+1) tokens with the needle at `depth`, from rng(seed)."""
    check_depths([depth])
    rng = np.random.default_rng(list(seed))
    key = int(rng.integers(10 ** (DIGITS - 1), 10 ** DIGITS))
    needle, question, answer = (tokenizer.tokenize(t.format(key=key)) for t in (NEEDLE, QUESTION, ANSWER))
    filler_tokens = length + 1 - len(needle) - len(question) - len(answer)
    if filler_tokens < 0:
        raise ProbeError(
            f"eval-lengths: length {length} cannot hold the passkey probe: its needle, question and answer "
            f"take {len(needle) + len(question) + len(answer)} tokens (+1 for the length's extra target). "
            f"Use eval-lengths of at least {len(needle) + len(question) + len(answer) - 1} with the passkey mode.")
    if len(stream) < filler_tokens:
        raise ProbeError(f"the evaluation stream has {len(stream)} tokens, fewer than the {filler_tokens} "
                         f"filler tokens of a length-{length} passkey sample; use shorter eval-lengths.")
    at = round(depth * filler_tokens)
    for _ in range(ATTEMPTS):  # filler that never says the key nor the needle's words: one needle only
        offset = int(rng.integers(0, len(stream) - filler_tokens + 1))
        filler = [int(t) for t in stream[offset:offset + filler_tokens]]
        text = tokenizer.detokenize(filler)
        if str(key) not in text and "pass key" not in text:
            break
    else:
        raise ProbeError(f"no filler of {filler_tokens} tokens without the key or 'pass key' in {ATTEMPTS} "
                         "tries; the evaluation split is too repetitive for this probe.")
    tokens = filler[:at] + needle + filler[at:] + question + answer
    return PasskeySample(tokens, answer, key, at, filler_tokens)


def make_grid(stream, tokenizer, length: int, depths, samples: int, eval_seed: int) -> list[list[PasskeySample]]:
    """[depth][sample] samples of one length; paired across runs by (eval_seed, length, i, j)."""
    check_depths(depths)
    return [[make_sample(stream, tokenizer, length, d, (eval_seed, length, i, j)) for j in range(samples)]
            for i, d in enumerate(depths)]
