"""What every probe generator shares: the sample, the depth and length checks, the filler draw and
the grid of paired prompts.

A sample of length L is L + 1 token ids, as a chunk is (megatron/evaluation/chunks.py): a forward over
its first L scores the answer as its last targets, and greedy decoding from the prompt (all but the
answer) never feeds more than L tokens. Depth d puts the needle after round(d * F) of the F filler
tokens: 0 at the start, 1 right before the question. Pieces are tokenized separately and joined as
ids, so a needle is whole whatever the tokenizer does at the seams.

`GridOptions` are the config keys every probe's grid reads (each probe's `Options` extends them).
"""
from dataclasses import dataclass

import numpy as np

from megatron.errors import NeoXArgsError
from megatron.model.positional_embeddings.base import option
from megatron.quoting import quote

ATTEMPTS = 100  # filler offsets tried before giving up on one whose text holds none of the forbidden strings


class ProbeError(NeoXArgsError):
    """A probe that cannot be made as configured (a length too short, a depth outside [0, 1])."""


@dataclass(frozen=True)
class ProbeSample:
    tokens: list[int]   # L + 1 ids: prompt then answer
    answer: list[int]   # the last len(answer) of `tokens`
    key: int            # what the answer says (the pass key, the queried value): the record's probe_keys
    needle_start: int   # index in `tokens` where the (queried) needle's ids begin
    filler_tokens: int  # F
    needle_end: int     # index just past the queried needle's last id

    @property
    def prompt(self) -> list[int]:
        return self.tokens[:len(self.tokens) - len(self.answer)]

    @property
    def distance(self) -> int:
        """Tokens from the needle's last id to the last prompt token: a model that attends to at most
        W tokens back (attention-window W) sees none of the needle when answering iff distance >= W."""
        return len(self.prompt) - self.needle_end


def depths_problem(depths) -> str | None:
    """What is wrong with a probe-depths value (the config's check), or None."""
    if not depths or not all(isinstance(d, (int, float)) and not isinstance(d, bool) and 0 <= d <= 1 for d in depths):
        return (f"must be a non-empty list of numbers in [0, 1] (0: the needle opens the prompt, 1: it ends right "
                f"before the question), got {quote(depths)}.")
    return None


def samples_problem(samples) -> str | None:
    return None if samples >= 1 else f"must be a positive integer, got {quote(samples)}."


@dataclass
class GridOptions:
    probe_depths: list = option([0.0, 0.25, 0.5, 0.75, 1.0], "`passkey`, `kv-retrieval`: where the needle (the "
                                "queried pair) sits, as fractions of the filler (0: the prompt opens with it, 1: "
                                "right before the question).", check=depths_problem)
    probe_samples: int = option(4, "`passkey`, `kv-retrieval`: prompts per (length, depth); the same ones for "
                                   "every run.", check=samples_problem)
    probe_greedy: bool = option(True, "`passkey`, `kv-retrieval`: also score greedy exact match (decoding), not "
                                      "only the teacher-forced answer log-probability and rank.")


def check_depths(depths) -> None:
    bad = [d for d in depths if isinstance(d, bool) or not isinstance(d, (int, float)) or not 0 <= d <= 1]
    if bad or not depths:
        raise ProbeError(f"probe-depths: every depth must be a number in [0, 1] (0: the needle opens the "
                         f"prompt, 1: it ends right before the question), got {quote(list(depths))}; bad: {quote(bad)}.")


def shortest_length(fixed_tokens: int) -> int:
    """The shortest length that holds a probe whose needle(s), question and answer take `fixed_tokens`
    (with no filler): a length-L sample is L + 1 tokens."""
    return fixed_tokens - 1


def _too_short(task: str, pieces: str, short: dict[int, int]) -> ProbeError:
    """The eval-lengths error for the lengths in `short` (length -> the fixed tokens of its samples)."""
    fixed = max(short.values())
    lengths = f"length {next(iter(short))}" if len(short) == 1 else f"lengths {', '.join(map(str, short))}"
    return ProbeError(
        f"eval-lengths: {lengths} cannot hold the {task} probe: its {pieces} take {fixed} tokens (+1 for the "
        f"length's extra target). Use eval-lengths of at least {shortest_length(fixed)} with the {task} mode.")


def filler_count(task: str, pieces: str, fixed_tokens: int, length: int) -> int:
    """F, the filler tokens of a length-`length` sample; the eval-lengths error when it has no room."""
    if length < shortest_length(fixed_tokens):
        raise _too_short(task, pieces, {length: fixed_tokens})
    return length + 1 - fixed_tokens


def _check_stream(stream: np.ndarray, count: int, task: str, length: int) -> None:
    if len(stream) < count:
        raise ProbeError(f"the evaluation stream has {len(stream)} tokens, fewer than the {count} filler "
                         f"tokens of a length-{length} {task} sample; use shorter eval-lengths.")


def check_lengths(fixed_tokens_of, stream: np.ndarray, lengths, depths, samples: int, eval_seed: int, task: str,
                  pieces: str) -> None:
    """Every length of an evaluation, checked before the first is scored: each sample of its grid fits
    (`fixed_tokens_of(seed)`: that sample's needle(s), question and answer, tokenized as make_sample
    does, so a BPE's per-key splits count) and the stream holds its filler. One error names every length
    that is too short."""
    check_depths(depths)
    short = {}
    for length in lengths:
        fixed = [fixed_tokens_of(sample_seed(eval_seed, length, i, j)) for i in range(len(depths))
                 for j in range(samples)]
        if length < shortest_length(max(fixed)):
            short[length] = max(fixed)
        else:
            _check_stream(stream, filler_count(task, pieces, min(fixed), length), task, length)
    if short:
        raise _too_short(task, pieces, short)


def draw_filler(rng, stream: np.ndarray, tokenizer, count: int, forbidden: list[str], task: str,
                length: int) -> list[int]:
    """`count` consecutive ids of `stream` from a random offset whose text holds none of `forbidden`
    (so the needle's key is said once only, by the needle)."""
    _check_stream(stream, count, task, length)
    for _ in range(ATTEMPTS):
        offset = int(rng.integers(0, len(stream) - count + 1))
        filler = [int(t) for t in stream[offset:offset + count]]
        text = tokenizer.detokenize(filler)
        if not any(f in text for f in forbidden):
            return filler
    shown = " or ".join(repr(f) for f in forbidden)
    raise ProbeError(f"no filler of {count} tokens without {shown} in {ATTEMPTS} tries; the text it is drawn "
                     f"from is too repetitive for the {task} probe.")


def sample_seed(eval_seed: int, length: int, i: int, j: int) -> tuple:
    """The seed of sample j at depth i of a length's grid: these only, so every method and training seed
    gets byte-identical prompts (paired across runs)."""
    return eval_seed, length, i, j


def make_grid(make_sample, stream, tokenizer, length: int, depths, samples: int, eval_seed: int,
              **options) -> list[list[ProbeSample]]:
    """[depth][sample] samples of one length, sample (i, j) seeded by sample_seed."""
    check_depths(depths)
    return [[make_sample(stream, tokenizer, length, d, sample_seed(eval_seed, length, i, j), **options)
             for j in range(samples)] for i, d in enumerate(depths)]
