"""The one verdict engine of the study reports: paired per-seed results of a dataset's runs at each length
-> which of two methods is significantly better at a length, at the long lengths, and the verdict words.

A study's rules (ablation.py's, the variants section's descriptions) differ only in what they measure and
what they call the outcomes; the tests, the pairing and the bookkeeping of "better at which lengths" are
written once here. `Perplexity` reads `nonoverlap` records (paired two-sided t-test on loss over seeds,
tools/analysis/significance.compare, the test of Table 3); `Accuracy` reads probe records (exact McNemar
test over (seed, sample) pairs). claims.py judges Table 3's cells, made by the same `compare`.
"""
import numpy as np

from tools.analysis.probe_table import correct
from tools.analysis.results_index import index_results
from tools.analysis.significance import compare, mcnemar
ALPHA = 0.05
LONG_RATIO = 8   # "long lengths": at least 8x the train length (the paper's 4096+ at 512)


def p_text(p) -> str:
    return "no test" if p is None else f"p = {p:.2g}"


class Measure:
    """One dataset's runs under one measure: {method: {length: {seed: record}}} with its training length.
    A measure gives value(method, L), shown(method, L) (the value as the verdicts print it) and
    better(a, b, L): (a significantly better, b significantly better, p) at length L."""
    mode = ""

    def __init__(self, runs: dict, train_length: int):
        self.runs, self.T = runs, train_length
        self.lengths = sorted({L for m in runs.values() for L in m})
        self.long = [L for L in self.lengths if L >= LONG_RATIO * train_length]

    def at_long_lengths(self, a, b, shown):
        """a against b at every long length: (lengths where a is significantly better, where b is, the numbers
        "L=..: x vs y (p)" with x and y the values of the two methods in `shown`)."""
        a_better, b_better, parts = [], [], []
        for L in self.long:
            x, y, p = self.better(a, b, L)
            a_better += [L] if x else []
            b_better += [L] if y else []
            parts.append(f"L={L}: {self.shown(shown[0], L)} vs {self.shown(shown[1], L)} ({p_text(p)})")
        return a_better, b_better, parts


class Perplexity(Measure):
    mode = "nonoverlap"

    def ratio(self, method, L) -> float:
        at_T, at_L = self.runs[method][self.T], self.runs[method][L]
        return float(np.mean([at_L[s]["ppl"] / at_T[s]["ppl"] for s in sorted(set(at_T) & set(at_L))]))

    def value(self, method, L) -> float:
        return float(np.mean([r["ppl"] for r in self.runs[method][L].values()]))

    ppl = value

    def shown(self, method, L) -> str:
        return f"{self.value(method, L):.4g}"

    def better(self, a, b, L):
        c = compare(self.runs[a][L], self.runs[b][L], ALPHA)
        if c.p_value is None or c.over != "seeds" or np.isnan(c.p_value):
            return False, False, None
        significant = c.p_value < ALPHA
        return significant and c.reference_loss < c.other_loss, significant and c.other_loss < c.reference_loss, c.p_value


class Accuracy(Measure):
    """Probe records; two models at one length pair by (seed, sample): every run scores byte-identical prompts."""
    mode = "kv-retrieval"

    def pairs(self, a, la, b, lb):
        """Outcomes of (a at length la, b at length lb) over the (seed, sample) pairs they share."""
        x, y = [], []
        ra, rb = self.runs[a].get(la, {}), self.runs[b].get(lb, {})
        for seed in sorted(set(ra) & set(rb)):
            if la == lb and ra[seed]["probe_keys"] != rb[seed]["probe_keys"]:
                raise ValueError(f"the probes at length {la} differ between {a} and {b}: evaluate both with "
                                 "the same eval-seed, probe-depths and probe-samples")
            ha, hb = correct(ra[seed]), correct(rb[seed])
            n = min(len(ha), len(hb))
            x += list(ha[:n])
            y += list(hb[:n])
        return np.array(x), np.array(y)

    def value(self, method, L) -> float:
        """Pooled over seeds: right answers / samples (a mean of per-seed means would put 6/120 above 0.05)."""
        hits = np.concatenate([correct(r) for r in self.runs[method][L].values()])
        return float(hits.sum() / len(hits))

    accuracy = value

    def shown(self, method, L) -> str:
        return f"{self.value(method, L):.2f}"

    def better(self, a, b, L):
        x, y = self.pairs(a, L, b, L)
        p, only_a, only_b = mcnemar(x, y)
        significant = p is not None and p < ALPHA
        return significant and only_a > only_b, significant and only_b > only_a, p


def by_dataset(documents, measure: type, mode: str | None = None):
    """(dataset, Measure) for every dataset whose runs share one training length, in name order."""
    index = index_results(documents, mode or measure.mode)
    lengths = {}
    for document in documents:
        lengths.setdefault(document["run"]["dataset"], set()).add(document["run"]["train_length"])
    for dataset, runs in sorted(index.items()):
        if len(lengths[dataset]) == 1:
            yield dataset, measure({str(m): v for m, v in runs.items()}, next(iter(lengths[dataset])))


def direction(reference_better: list, other_better: list, *, every: str | None, worse: str, better: str) -> str:
    """The verdict on `other` (a switch, a variant) against the reference at the long lengths: `every` when
    it applies, `mixed` when each is significantly better somewhere, `worse` / `better` (formatted with the
    lengths) when only one is, else no significant effect."""
    if every:
        return every
    if reference_better and other_better:
        return "mixed"
    if reference_better:
        return worse.format(reference_better)
    if other_better:
        return better.format(other_better)
    return "no significant effect"


def against_anchor(better: list, worse: list, long: list, anchor: str, word: str) -> str:
    """A model against the anchor at the long lengths: better (all), worse (some), better at some, or neither."""
    return (f"worse ({anchor} significantly {word} at L = {worse})" if worse else
            "better" if long and better == long else
            f"better at L = {better} only" if better else "not significantly different")


def verdict_table(title: str, rows, first: str = "question") -> list[str]:
    """A dataset's verdicts as report lines: the title, then | question | verdict | numbers |."""
    return [title, f"| {first} | verdict | numbers |", "|---|---|---|",
            *(f"| {q} | **{v}** | {e} |" for q, v, e in rows), ""]
