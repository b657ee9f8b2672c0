"""Is the reference method significantly better than another? Paired two-sided t-test on losses.

Pairs are seeds (the paper's test: each seed's mean loss) when the two methods share at least two
seeds; with a single run each, pairs are the evaluation chunks (every model is scored on the same
chunks, so chunk i of one run pairs with chunk i of the other). The test is on loss (log-perplexity),
whose differences are better behaved than perplexity's; the dagger needs p < alpha *and* the
reference's mean loss below the other's.
"""
from dataclasses import dataclass

import numpy as np
from scipy import stats

from megatron.evaluation.results import ResultFileError


@dataclass
class Comparison:
    p_value: float | None  # None: no pairing possible (e.g. 3 seeds against 1 with no seed shared)
    over: str | None       # "seeds" or "chunks"
    pairs: int
    reference_loss: float | None
    other_loss: float | None
    dagger: bool


def compare(reference: dict, other: dict, alpha: float = 0.05) -> Comparison:
    """reference, other: {seed: result record} at one (dataset, length, mode)."""
    shared = sorted(set(reference) & set(other))
    if len(shared) >= 2:
        ref = np.array([reference[s]["loss"] for s in shared])
        oth = np.array([other[s]["loss"] for s in shared])
        over = "seeds"
    elif len(shared) == 1 or (len(reference) == 1 and len(other) == 1):
        ref_record, oth_record = ((reference[shared[0]], other[shared[0]]) if shared
                                  else (next(iter(reference.values())), next(iter(other.values()))))
        if ref_record["chunk_starts"] != oth_record["chunk_starts"]:
            raise ResultFileError(
                f"runs scored on different chunks cannot be paired over chunks (length "
                f"{ref_record['length']}, {ref_record['mode']}): re-evaluate both with the same "
                "eval-seed, eval-chunks and eval-split")
        ref, oth = np.array(ref_record["chunk_losses"]), np.array(oth_record["chunk_losses"])
        over = "chunks"
    else:
        return Comparison(None, None, 0, None, None, False)
    if len(ref) < 2:
        return Comparison(None, over, len(ref), float(ref.mean()), float(oth.mean()), False)
    p_value = float(stats.ttest_rel(ref, oth).pvalue)  # NaN when every difference is equal
    dagger = bool(p_value < alpha and ref.mean() < oth.mean())
    return Comparison(p_value, over, len(ref), float(ref.mean()), float(oth.mean()), dagger)
