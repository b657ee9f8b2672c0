"""Is the reference run significantly better or worse than another? Two-sided t-tests, chosen by the seeds.

The unit of a test is what varies between repetitions of an experiment:
- **both runs have >= 2 seeds**: a test across seeds on each seed's score (for perplexity its loss,
  i.e. log-perplexity, whose differences are better behaved than perplexity's): a *paired* t-test
  when both have exactly the same seeds (a seed fixes the data order, shared by both runs), else
  *Welch's* t-test (unequal variances) over all seeds of each;
- **one seed against several**: the single run against the other's seed spread, a Student t-test
  with one observation on one side (Crawford & Howell's test of a single case against a small
  sample: t = (mean - x) / (s * sqrt(1 + 1/n)), n - 1 degrees of freedom). It assumes the single
  run would vary across seeds as much as the other does; a chunk-level test is never used here, since
  it would set evaluation noise against a spread that includes training noise;
- **one seed each**: a paired t-test over the evaluation chunks (or samples) both were scored on:
  this measures evaluation noise only, not how another training seed would differ.
A mark needs p < alpha: † where the reference is significantly better, ‡ where it is significantly
worse. A p-value that cannot be computed (every difference equal, no spread) marks nothing.
"""
from dataclasses import dataclass

import numpy as np
from scipy import stats

from megatron.evaluation.results import ResultFileError

REFERENCE_BETTER = "†"
REFERENCE_WORSE = "‡"

PAIRED_SEEDS = "paired t-test over seeds"
WELCH_SEEDS = "Welch's t-test over seeds"
ONE_AGAINST_SPREAD = "t-test of a one-seed run against the other's seed spread"
PAIRED_CHUNKS = "paired t-test over chunks, one seed each: evaluation noise only"


@dataclass
class Comparison:
    p_value: float | None  # None: nothing to test (a single chunk, no runs)
    over: str | None       # "seeds" (any test across seeds) or "chunks"
    pairs: int | None      # paired tests: the number of pairs; None for the unpaired ones
    reference_loss: float | None
    other_loss: float | None
    dagger: bool           # the reference significantly better (lower loss): †
    test: str | None = None          # one of the tests above
    reference_worse: bool = False    # the reference significantly worse: ‡
    seeds: tuple = (0, 0)  # (reference, other) seeds the test used

    @property
    def mark(self) -> str:
        return REFERENCE_BETTER if self.dagger else REFERENCE_WORSE if self.reference_worse else ""


def across_seeds(reference: dict, other: dict) -> tuple[str, float, int | None] | None:
    """{seed: the seed's score} of each run -> (test, p-value, pairs or None), or None when both have a
    single seed (the caller pairs their chunks or samples). NaN p-values (no spread) come back as NaN."""
    ref, oth = sorted(reference), sorted(other)
    a, b = np.array([reference[s] for s in ref], float), np.array([other[s] for s in oth], float)
    if len(a) < 2 and len(b) < 2:
        return None
    if ref == oth:
        return PAIRED_SEEDS, float(stats.ttest_rel(a, b).pvalue), len(a)
    if len(a) >= 2 and len(b) >= 2:
        return WELCH_SEEDS, float(stats.ttest_ind(a, b, equal_var=False).pvalue), None
    # n against 1: the pooled two-sample t-test is exactly the single-case test (the single side adds no
    # variance term and no degree of freedom)
    return ONE_AGAINST_SPREAD, float(stats.ttest_ind(a, b, equal_var=True).pvalue), None


def significant(p_value: float | None, alpha: float) -> bool:
    return p_value is not None and not np.isnan(p_value) and p_value < alpha


def seed_aware_test(reference: dict, other: dict, score, units) -> tuple[str, float | None, int | None, float, float]:
    """The test the seeds call for (module docstring) between two {seed: record} of one length, non-empty.
    score(record) -> that seed's score; units(reference record, other record) -> the paired per-chunk (or
    per-sample) arrays of two single-seed runs. -> (test, p-value or None, pairs or None, reference mean,
    other mean): the means are over seeds, or over the paired units of two single-seed runs."""
    ref_scores = {s: float(score(r)) for s, r in reference.items()}
    oth_scores = {s: float(score(r)) for s, r in other.items()}
    found = across_seeds(ref_scores, oth_scores)
    if found is not None:
        test, p_value, pairs = found
        return test, p_value, pairs, float(np.mean(list(ref_scores.values()))), float(np.mean(list(oth_scores.values())))
    a, b = (np.asarray(x, float) for x in units(next(iter(reference.values())), next(iter(other.values()))))
    if len(a) == 0:
        return PAIRED_CHUNKS, None, 0, float("nan"), float("nan")
    p_value = float(stats.ttest_rel(a, b).pvalue) if len(a) >= 2 else None  # NaN when every difference is equal
    return PAIRED_CHUNKS, p_value, len(a), float(a.mean()), float(b.mean())


def mark(p_value: float | None, reference_mean: float, other_mean: float, alpha: float,
         lower_is_better: bool) -> str:
    """† (reference significantly better), ‡ (significantly worse) or ""."""
    if not significant(p_value, alpha) or reference_mean == other_mean:
        return ""
    return REFERENCE_BETTER if (reference_mean < other_mean) == lower_is_better else REFERENCE_WORSE


def _chunks(reference: dict, other: dict):
    if reference["chunk_starts"] != other["chunk_starts"]:
        raise ResultFileError(
            f"runs scored on different chunks cannot be paired over chunks (length "
            f"{reference['length']}, {reference['mode']}): re-evaluate both with the same "
            "eval-seed, eval-chunks and eval-split")
    return reference["chunk_losses"], other["chunk_losses"]


def compare(reference: dict, other: dict, alpha: float = 0.05) -> Comparison:
    """reference, other: {seed: result record} at one (dataset, length, mode); tests on loss."""
    if not reference or not other:
        return Comparison(None, None, None, None, None, False)
    test, p_value, pairs, ref_loss, oth_loss = seed_aware_test(reference, other, lambda r: r["loss"], _chunks)
    found = mark(p_value, ref_loss, oth_loss, alpha, lower_is_better=True)
    return Comparison(p_value, "chunks" if test == PAIRED_CHUNKS else "seeds", pairs, ref_loss, oth_loss,
                      found == REFERENCE_BETTER, test, found == REFERENCE_WORSE, (len(reference), len(other)))


def tests_note(used, reference: str, alpha: float, better: str = "better", unit: str = "chunks") -> str:
    """The note's sentence: what the marks mean and which tests made them. used: (test, (reference seeds,
    other seeds)) of every comparison made; unit: what one seed each is paired over (chunks, samples)."""
    used = list(used)
    tests = [t.replace("chunks", unit) for t in (PAIRED_SEEDS, WELCH_SEEDS, ONE_AGAINST_SPREAD, PAIRED_CHUNKS)
             if any(u[0] == t for u in used)]
    worse = {"better": "worse", "higher": "lower", "lower": "higher"}[better]
    text = (f"{REFERENCE_BETTER} / {REFERENCE_WORSE}: {reference} significantly {better} / {worse} "
            f"(two-sided, α = {alpha}; {'; '.join(tests) or 'nothing tested'}")
    mixed = sorted({seeds for test, seeds in used if test == ONE_AGAINST_SPREAD})
    if mixed:
        text += (" — compared: " + ", ".join(f"{r} seed{'s' * (r > 1)} against {o}" for r, o in mixed)
                 + ", the one-seed run taken to vary across seeds as the other does")
    return text + ")."


def mcnemar(a, b) -> tuple[float | None, int, int]:
    """Exact McNemar test of paired 0/1 outcomes (a two-sided binomial test on the discordant pairs):
    (p, pairs only a got right, pairs only b got right); p is None when no pair is discordant."""
    a, b = np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)
    only_a, only_b = int((a & ~b).sum()), int((~a & b).sum())
    p = stats.binomtest(only_a, only_a + only_b).pvalue if only_a + only_b else None
    return (None if p is None else float(p)), only_a, only_b
