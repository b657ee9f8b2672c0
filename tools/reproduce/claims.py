"""The paper's four claims, judged at this scale by fixed rules (CLAIM_RULES) written before the runs.

Pure functions of Table 3 (and, for claim 4, the position-wise losses of the result files): the report
prints their verdicts, and tests/reproduce/test_reproduce_claims.py makes each verdict come out each way.
"""
import dataclasses

import numpy as np
from scipy import stats

from .verdicts import LONG_RATIO, verdict_table

BOUNDED_RATIO = 2.0    # claim 1: "blows up" = perplexity at the longest length >= 2x that at the train length
COMPETITIVE = 0.03     # claim 3: T5 within 3% of KERPLE-log's perplexity at the train length


@dataclasses.dataclass
class Cells:
    """Table 3 of one dataset, read the way the claims are stated (reference: KERPLE-log)."""
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
        """KERPLE-log's loss is significantly lower than `method`'s (the table's dagger)."""
        c = self.comparison(method, length)
        return bool(c and c.dagger)

    def reference_worse(self, method, length) -> bool:
        c = self.comparison(method, length)
        return bool(c and c.p_value is not None and c.p_value < self.table.alpha and c.other_loss < c.reference_loss)


def claim_verdicts(table, documents, position_length=None, windowed_baseline=None) -> dict:
    """{dataset: [(claim, verdict, evidence)]}: the paper's four claims judged by the fixed rules in
    CLAIM_RULES. `table` is Table 3 (tools/analysis/make_tables.build_table3) with KERPLE-log as the
    reference; `documents` are the result files, read for claim 4's position-wise losses at
    `position_length`, which needs the `windowed_baseline` run of kerple_log."""
    verdicts = {}
    for dataset in table.datasets:
        T = table.train_length.get(dataset)
        if T is None or T not in table.lengths or table.reference != "kerple_log":
            continue
        cells = Cells(table, dataset)
        verdicts[dataset] = [_claim1(cells, T), _claim2(cells, T), _claim3(cells, T),
                             _claim4(documents, position_length, windowed_baseline, dataset, T)]
    return verdicts


def _claim1(cells, T):
    claim = "1. Sinusoidal and rotary blow up beyond the training length; ALiBi, T5, KERPLE stay bounded"
    longest = max(cells.table.lengths)
    blowing = [m for m in ("sinusoidal", "rotary") if m in cells.methods()]
    bounded = [m for m in ("alibi", "t5", "kerple_log", "kerple_power") if m in cells.methods()]
    if not blowing or not bounded:
        return claim, "not assessed", "needs sinusoidal or rotary, and ALiBi, T5 or KERPLE"
    at_longest = {m: cells.ratio(m, longest, T) for m in blowing}
    worst = {m: max(cells.ratio(m, L, T) or 0 for L in cells.table.lengths if L > T) for m in bounded}
    evidence = (f"ppl(L={longest}) / ppl(L={T}): " + ", ".join(f"{m} {r:.3g}x" for m, r in at_longest.items() if r)
                + "; largest ppl(L) / ppl(L={T}) over all L: ".replace("{T}", str(T))
                + ", ".join(f"{m} {r:.3g}x" for m, r in worst.items()))
    blow = sum(r is not None and r >= BOUNDED_RATIO for r in at_longest.values())
    stay = sum(r < BOUNDED_RATIO for r in worst.values())
    verdict = ("confirmed" if blow == len(blowing) and stay == len(bounded) else
               "not confirmed" if blow == 0 or stay == 0 else "partly confirmed")
    return claim, verdict, evidence


def _claim2(cells, T):
    claim = "2. KERPLE-log is at least as good as ALiBi at every length and better at long lengths"
    if "alibi" not in cells.methods():
        return claim, "not assessed", "needs alibi"
    lengths = [L for L in cells.table.lengths if cells.ppl("kerple_log", L) and cells.ppl("alibi", L)]
    long = [L for L in lengths if L >= LONG_RATIO * T]
    alibi_better = [L for L in lengths if cells.reference_worse("alibi", L)]
    log_better = [L for L in long if cells.reference_better("alibi", L)]
    log_lower = [L for L in long if cells.ppl("kerple_log", L) < cells.ppl("alibi", L)]
    evidence = "KERPLE-log vs ALiBi ppl: " + "; ".join(
        f"L={L}: {cells.ppl('kerple_log', L):.3g} vs {cells.ppl('alibi', L):.3g} ({cells.p('alibi', L)})"
        for L in lengths)
    if alibi_better:
        verdict = f"not confirmed (ALiBi significantly better at L = {alibi_better})"
    elif long and log_better == long:
        verdict = "confirmed"
    elif long and log_lower == long:
        verdict = "partly confirmed (lower at every long length, not significantly at all of them)"
    else:
        verdict = "not confirmed (not better at long lengths)"
    return claim, verdict, evidence


def _claim3(cells, T):
    claim = "3. T5 is competitive near the training length and degrades at long lengths"
    longest = max(cells.table.lengths)
    values = [cells.ppl(m, L) for m in ("t5", "kerple_log") for L in (T, longest)]
    if "t5" not in cells.methods() or None in values:
        return claim, "not assessed", f"needs T5 and KERPLE-log at L={T} and L={longest}"
    t5_T, t5_long, log_T, log_long = values
    competitive = t5_T <= log_T * (1 + COMPETITIVE) or not cells.reference_better("t5", T)
    degrades = cells.reference_better("t5", longest) and t5_long / t5_T > log_long / log_T
    evidence = (f"L={T}: T5 {t5_T:.3g} vs KERPLE-log {log_T:.3g} ({cells.p('t5', T)}); L={longest}: T5 "
                f"{t5_long:.3g} vs {log_long:.3g} ({cells.p('t5', longest)}); ppl(L={longest}) / ppl(L={T}): "
                f"T5 {t5_long / t5_T:.3g}, KERPLE-log {log_long / log_T:.3g}")
    verdict = ("confirmed" if competitive and degrades else
               "partly confirmed" if competitive or degrades else "not confirmed")
    return claim, verdict, evidence


def _claim4(documents, L, windowed_baseline, dataset, T):
    claim = "4. KERPLE-log's position-wise loss keeps falling past the training length, below the windowed baseline"
    if not L or windowed_baseline != "kerple_log":
        return claim, "not assessed", "needs position_length and windowed_baseline: kerple_log"
    curves = {False: {}, True: {}}  # windowed? -> seed -> position loss
    for doc in documents:
        run = doc["run"]
        record = next((r for r in doc["results"] if r["length"] == L and r["mode"] == "position"
                       and "skipped" not in r), None)
        if run["dataset"] == dataset and run["pos_emb"] == "kerple_log" and record:
            curves[bool(run.get("attention_window"))][run["seed"]] = np.array(record["position_loss"])
    seeds = sorted(set(curves[False]) & set(curves[True]))
    if not seeds:
        return claim, "not assessed", f"no position-wise results at L={L} for kerple_log and its windowed run"
    full = np.array([curves[False][s][T:].mean() for s in seeds])
    windowed = np.array([curves[True][s][T:].mean() for s in seeds])
    tail = max(T, L // 8)
    near = np.mean([curves[False][s][T:2 * T].mean() for s in seeds])
    far = np.mean([curves[False][s][-tail:].mean() for s in seeds])
    p = stats.ttest_rel(full, windowed).pvalue if len(seeds) > 1 else float("nan")
    below, falling = full.mean() < windowed.mean(), far < near
    evidence = (f"L={L}, mean ppl over positions {T}..{L - 1}: KERPLE-log {np.exp(full.mean()):.4g} vs windowed "
                f"{np.exp(windowed.mean()):.4g} (paired over {len(seeds)} seeds, p = {p:.3g}); KERPLE-log ppl at "
                f"positions {T}..{2 * T - 1}: {np.exp(near):.4g}, at the last {tail}: {np.exp(far):.4g}")
    verdict = ("confirmed" if below and falling and (p < 0.05 or len(seeds) == 1) else
               "partly confirmed" if below or falling else "not confirmed")
    return claim, verdict, evidence


CLAIM_RULES = (
    f"*blows up*: perplexity at the longest length at least {BOUNDED_RATIO:g}x the method's own perplexity "
    f"at the training length; *bounded*: below {BOUNDED_RATIO:g}x at every length. *Significantly better*: "
    "lower loss by a paired two-sided t-test over seeds (α = 0.05), the dagger of Table 3. *Long lengths*: "
    f"at least {LONG_RATIO}x the training length. T5 *competitive*: within {COMPETITIVE:.0%} of KERPLE-log "
    "at the training length, or not significantly worse; T5 *degrades*: significantly worse than KERPLE-log "
    "at the longest length and its perplexity rises more (or falls less) from the training length than "
    "KERPLE-log's. Claim 4: *below the windowed baseline*: mean loss over positions past the training length "
    "lower than the windowed run's (paired t-test over seeds); *keeps falling*: KERPLE-log's perplexity over "
    "the last max(T, L/8) positions below its perplexity at positions T..2T-1. A claim is *confirmed* when "
    "every part holds, *partly confirmed* when some do."
)


def claims_section(scale, table, documents, position_length=None, windowed_baseline=None) -> str:
    verdicts = claim_verdicts(table, documents, position_length, windowed_baseline)
    lines = ["## The paper's four claims at this scale\n",
             f"_Scale: {scale}_\n",
             "Judged by fixed rules, written into tools/reproduce/claims.py before the runs: " + CLAIM_RULES + "\n"]
    for dataset, rows in verdicts.items():
        lines += verdict_table(f"**{dataset}**\n", rows, first="claim")
    return "\n".join(lines)
