"""The paper's four claims, judged at this scale by fixed rules (`rules_text`) written before the runs.

The study file says which of its methods the claims name (`claims: {reference: kerple_log, anchor: alibi,
competitive: t5, blow-up: [sinusoidal, rotary], bounded: [alibi, t5, kerple_log, kerple_power]}`, the
KERPLE paper's); a study without the key judges no claims. The rules themselves (what "blows up",
"competitive" and "keeps falling" mean, and their thresholds) stay here: written before the runs, they are
not a study's to tune after seeing its numbers.

Pure functions of Table 3 (and, for claim 4, the position-wise losses of the result files): the report
prints their verdicts, and tests/reproduce/test_reproduce_claims.py makes each verdict come out each way.
"""
import dataclasses

import numpy as np
from scipy import stats

from tools.analysis.paper_numbers import method_name
from .verdicts import LONG_RATIO, verdict_table

BOUNDED_RATIO = 2.0    # claim 1: "blows up" = perplexity at the longest length >= 2x that at the train length
COMPETITIVE = 0.03     # claim 3: the competitive method within 3% of the reference's perplexity at the train length


@dataclasses.dataclass(frozen=True)
class Claims:
    """The methods the claims name (the study file's `claims`): claims 2-4 set `reference` against `anchor`,
    `competitive` and its windowed run; claim 1 says `blow_up` blow up and `bounded` stay bounded."""
    reference: str
    anchor: str
    competitive: str
    blow_up: tuple
    bounded: tuple

    def names(self, role: str) -> str:
        return method_name(getattr(self, role))


def _families(methods) -> list:
    """Names for a list of methods, each family once (KERPLE-log and KERPLE-power: KERPLE), as the paper words
    claim 1."""
    return list(dict.fromkeys(method_name(m).split("-")[0] for m in methods))


def _or(words) -> str:
    return ", ".join(words[:-1]) + " or " + words[-1] if len(words) > 1 else "".join(words)


@dataclasses.dataclass
class Cells:
    """Table 3 of one dataset, read the way the claims are stated (against the table's reference)."""
    table: object
    dataset: str

    def methods(self) -> list:
        return self.table.methods[self.dataset]

    def ppl(self, method, length) -> float | None:
        cell = self.table.cells.get((self.dataset, method, length))
        return cell.ppl_mean if cell else None

    def ratio(self, method, length, train_length) -> float | None:
        a, b = self.ppl(method, train_length), self.ppl(method, length)
        return None if a is None or b is None else b / a

    def comparison(self, method, length):
        cell = self.table.cells.get((self.dataset, method, length))
        return cell.comparison if cell else None

    def p(self, method, length) -> str:
        c = self.comparison(method, length)
        return f"p = {c.p_value:.3g}" if c and c.p_value is not None else "no test"

    def reference_better(self, method, length) -> bool:
        """The reference's loss is significantly lower than `method`'s (the table's dagger)."""
        c = self.comparison(method, length)
        return bool(c and c.dagger)

    def reference_worse(self, method, length) -> bool:
        c = self.comparison(method, length)
        return bool(c and c.p_value is not None and c.p_value < self.table.alpha and c.other_loss < c.reference_loss)


def claim_verdicts(claims: Claims, table, documents, position_length=None, windowed_baseline=None) -> dict:
    """{dataset: [(claim, verdict, evidence)]}: the four claims judged by the fixed rules of `rules_text`.
    `table` is Table 3 (tools/analysis/make_tables.build_table3) with the claims' reference as its reference;
    `documents` are the result files, read for claim 4's position-wise losses at `position_length`, which
    needs the `windowed_baseline` run of the reference."""
    verdicts = {}
    for dataset in table.datasets:
        T = table.train_length.get(dataset)
        if T is None or T not in table.lengths or table.reference != claims.reference:
            continue
        cells = Cells(table, dataset)
        verdicts[dataset] = [_claim1(claims, cells, T), _claim2(claims, cells, T), _claim3(claims, cells, T),
                             _claim4(claims, documents, position_length, windowed_baseline, dataset, T)]
    return verdicts


def _claim1(claims, cells, T):
    blow_up, bounded = _families(claims.blow_up), _families(claims.bounded)
    sentence = f"{' and '.join(blow_up)} blow up beyond the training length; {', '.join(bounded)} stay bounded"
    claim = "1. " + sentence[0].upper() + sentence[1:]
    longest = max(cells.table.lengths)
    blowing = [m for m in claims.blow_up if m in cells.methods()]
    stays = [m for m in claims.bounded if m in cells.methods()]
    if not blowing or not stays:
        return claim, "not assessed", f"needs {_or(list(claims.blow_up))}, and {_or(bounded)}"
    at_longest = {m: cells.ratio(m, longest, T) for m in blowing}
    worst = {m: max(cells.ratio(m, L, T) or 0 for L in cells.table.lengths if L > T) for m in stays}
    evidence = (f"ppl(L={longest}) / ppl(L={T}): " + ", ".join(f"{m} {r:.3g}x" for m, r in at_longest.items() if r)
                + "; largest ppl(L) / ppl(L={T}) over all L: ".replace("{T}", str(T))
                + ", ".join(f"{m} {r:.3g}x" for m, r in worst.items()))
    blow = sum(r is not None and r >= BOUNDED_RATIO for r in at_longest.values())
    stay = sum(r < BOUNDED_RATIO for r in worst.values())
    verdict = ("confirmed" if blow == len(blowing) and stay == len(stays) else
               "not confirmed" if blow == 0 or stay == 0 else "partly confirmed")
    return claim, verdict, evidence


def _claim2(claims, cells, T):
    ref, anchor, R, A = claims.reference, claims.anchor, claims.names("reference"), claims.names("anchor")
    claim = f"2. {R} is at least as good as {A} at every length and better at long lengths"
    if anchor not in cells.methods():
        return claim, "not assessed", f"needs {anchor}"
    lengths = [L for L in cells.table.lengths if cells.ppl(ref, L) and cells.ppl(anchor, L)]
    long = [L for L in lengths if L >= LONG_RATIO * T]
    anchor_better = [L for L in lengths if cells.reference_worse(anchor, L)]
    ref_better = [L for L in long if cells.reference_better(anchor, L)]
    ref_lower = [L for L in long if cells.ppl(ref, L) < cells.ppl(anchor, L)]
    evidence = f"{R} vs {A} ppl: " + "; ".join(
        f"L={L}: {cells.ppl(ref, L):.3g} vs {cells.ppl(anchor, L):.3g} ({cells.p(anchor, L)})" for L in lengths)
    if anchor_better:
        verdict = f"not confirmed ({A} significantly better at L = {anchor_better})"
    elif long and ref_better == long:
        verdict = "confirmed"
    elif long and ref_lower == long:
        verdict = "partly confirmed (lower at every long length, not significantly at all of them)"
    else:
        verdict = "not confirmed (not better at long lengths)"
    return claim, verdict, evidence


def _claim3(claims, cells, T):
    ref, other, R, C = claims.reference, claims.competitive, claims.names("reference"), claims.names("competitive")
    claim = f"3. {C} is competitive near the training length and degrades at long lengths"
    longest = max(cells.table.lengths)
    values = [cells.ppl(m, L) for m in (other, ref) for L in (T, longest)]
    if other not in cells.methods() or None in values:
        return claim, "not assessed", f"needs {C} and {R} at L={T} and L={longest}"
    other_T, other_long, ref_T, ref_long = values
    competitive = other_T <= ref_T * (1 + COMPETITIVE) or not cells.reference_better(other, T)
    degrades = cells.reference_better(other, longest) and other_long / other_T > ref_long / ref_T
    evidence = (f"L={T}: {C} {other_T:.3g} vs {R} {ref_T:.3g} ({cells.p(other, T)}); L={longest}: {C} "
                f"{other_long:.3g} vs {ref_long:.3g} ({cells.p(other, longest)}); ppl(L={longest}) / ppl(L={T}): "
                f"{C} {other_long / other_T:.3g}, {R} {ref_long / ref_T:.3g}")
    verdict = ("confirmed" if competitive and degrades else
               "partly confirmed" if competitive or degrades else "not confirmed")
    return claim, verdict, evidence


def _claim4(claims, documents, L, windowed_baseline, dataset, T):
    ref, R = claims.reference, claims.names("reference")
    claim = f"4. {R}'s position-wise loss keeps falling past the training length, below the windowed baseline"
    if not L or windowed_baseline != ref:
        return claim, "not assessed", f"needs position_length and windowed_baseline: {ref}"
    curves = {False: {}, True: {}}  # windowed? -> seed -> position loss
    for doc in documents:
        run = doc["run"]
        record = next((r for r in doc["results"] if r["length"] == L and r["mode"] == "position"
                       and "skipped" not in r), None)
        if run["dataset"] == dataset and run["pos_emb"] == ref and record:
            curves[bool(run.get("attention_window"))][run["seed"]] = np.array(record["position_loss"])
    seeds = sorted(set(curves[False]) & set(curves[True]))
    if not seeds:
        return claim, "not assessed", f"no position-wise results at L={L} for {ref} and its windowed run"
    full = np.array([curves[False][s][T:].mean() for s in seeds])
    windowed = np.array([curves[True][s][T:].mean() for s in seeds])
    tail = max(T, L // 8)
    near = np.mean([curves[False][s][T:2 * T].mean() for s in seeds])
    far = np.mean([curves[False][s][-tail:].mean() for s in seeds])
    p = stats.ttest_rel(full, windowed).pvalue if len(seeds) > 1 else float("nan")
    below, falling = full.mean() < windowed.mean(), far < near
    evidence = (f"L={L}, mean ppl over positions {T}..{L - 1}: {R} {np.exp(full.mean()):.4g} vs windowed "
                f"{np.exp(windowed.mean()):.4g} (paired over {len(seeds)} seeds, p = {p:.3g}); {R} ppl at "
                f"positions {T}..{2 * T - 1}: {np.exp(near):.4g}, at the last {tail}: {np.exp(far):.4g}")
    verdict = ("confirmed" if below and falling and (p < 0.05 or len(seeds) == 1) else
               "partly confirmed" if below or falling else "not confirmed")
    return claim, verdict, evidence


def rules_text(claims: Claims) -> str:
    R, C = claims.names("reference"), claims.names("competitive")
    return (
        f"*blows up*: perplexity at the longest length at least {BOUNDED_RATIO:g}x the method's own perplexity "
        f"at the training length; *bounded*: below {BOUNDED_RATIO:g}x at every length. *Significantly better*: "
        "lower loss by a paired two-sided t-test over seeds (α = 0.05), the dagger of Table 3. *Long lengths*: "
        f"at least {LONG_RATIO}x the training length. {C} *competitive*: within {COMPETITIVE:.0%} of {R} "
        f"at the training length, or not significantly worse; {C} *degrades*: significantly worse than {R} "
        "at the longest length and its perplexity rises more (or falls less) from the training length than "
        f"{R}'s. Claim 4: *below the windowed baseline*: mean loss over positions past the training length "
        f"lower than the windowed run's (paired t-test over seeds); *keeps falling*: {R}'s perplexity over "
        "the last max(T, L/8) positions below its perplexity at positions T..2T-1. A claim is *confirmed* when "
        "every part holds, *partly confirmed* when some do."
    )


def claims_section(sweep, table, documents) -> str:
    """The claims' section of the report: only for a study whose file names the claims' methods (`claims:`)."""
    if not sweep.claims:
        return ""
    claims = Claims(**sweep.claims)
    verdicts = claim_verdicts(claims, table, documents, sweep.position_length, sweep.windowed_baseline)
    lines = ["## The paper's four claims at this scale\n",
             f"_Scale: {sweep.scale}_\n",
             "Judged by fixed rules, written into tools/reproduce/claims.py before the runs: "
             + rules_text(claims) + "\n"]
    for dataset, rows in verdicts.items():
        lines += verdict_table(f"**{dataset}**\n", rows, first="claim")
    return "\n".join(lines)
