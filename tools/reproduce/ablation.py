"""Which switch makes a method degrade: an ablation's questions, judged by fixed rules written here before
the runs (`rules_text`), like the paper's claims in claims.py. The study file names the method and the
anchor (`ablation: {method: kerple_log, anchor: alibi}`); the rules are the same for any pair.

The sweep trains the method with each switch (`training_variants`, reported as `<method>+<label>`) beside
its plain run (the reference) and the anchor, and scores every run on the same chunks. Three questions, per
dataset:

1. Degradation: does a model's perplexity rise with length (as another paper's reports of the method do,
   where theirs.py has them: DAPE-V2's KERPLE-log)?
2. Switch: does a switch make the method worse at long lengths than the reference, and does it reproduce
   the degradation?
3. Anchor: is each variant of the method at least as good as the anchor at long lengths?
and, over all of them, 4. Chunk count: does any verdict change when a run's perplexity is read from
fewer of its chunks (`chunk_subsets`) instead of all it scored?

Pure functions of the result files over the one verdict engine (verdicts.py: the tests, the pairing, the
verdict words); tests/reproduce/test_reproduce_ablation.py makes each verdict come out each way.
"""
import dataclasses

import numpy as np

from tools.analysis.paper_numbers import method_name
from tools.analysis.significance import compare, mcnemar
from .theirs import reports
from .verdicts import ALPHA, LONG_RATIO, Accuracy, Perplexity, against_anchor, by_dataset, direction, p_text

DEGRADE_RATIO = 1.25   # rule 1: mean ppl(L) / ppl(T) at a long length; DAPE-V2's KERPLE: 1.49 at 8x, 1.99 at 16x


@dataclasses.dataclass(frozen=True)
class Ablation:
    """One study's ablation: `method`'s training variants (`switches`, their labels) against its plain run,
    and every one of them against `anchor`."""
    method: str
    anchor: str
    switches: tuple = ()

    @property
    def name(self) -> str:
        return method_name(self.method)

    @property
    def anchor_name(self) -> str:
        return method_name(self.anchor)

    @property
    def theirs(self):
        """The report the ablation asks about (theirs.py), or None."""
        return next(iter(reports(self.method)), None)

    def degradation(self) -> str:
        """"the DAPE-V2 degradation", or "the degradation" where no paper reports the method."""
        return f"the {self.theirs.name} degradation" if self.theirs else "the degradation"

    def plain(self) -> str:
        return f" {self.theirs.plain}" if self.theirs and self.theirs.plain else ""


def rules_text(study: Ablation, fewest: int | None) -> str:
    """Rules 1-4; `fewest` is the smallest chunk count of rule 4 (the study's `chunk_subsets`)."""
    theirs, m = study.theirs, study.method
    pattern, cited = "", ""
    if theirs:
        name, curve = theirs.ppl[m]
        pattern = f" (the {theirs.name} pattern)"
        cited = f" ({theirs.name}'s {name}: " + ", ".join(
            f"{curve[f] / curve[1]:.2f} at {f}x" for f in sorted(curve) if f >= LONG_RATIO) + ")"
    return (
        f"*Long lengths*: at least {LONG_RATIO}x the training length T. *Significantly* better or worse: a paired "
        f"two-sided t-test on loss over seeds (α = {ALPHA}), the test of Table 3. "
        f"**1. Degrades**{pattern}: at some long length L, the mean over seeds of ppl(L) / ppl(T) is at "
        f"least {DEGRADE_RATIO:g}{cited} and the loss at L is significantly "
        f"above the loss at T (pairs: each seed's two losses). **2. A switch** (a training variant of {m}, "
        f"against {m}{study.plain()}): *reproduces the degradation* when the variant degrades, "
        f"the reference does not, and the reference is significantly better at every long length; *makes {study.name} "
        "worse* when the reference is significantly better at some long length and the variant at none; *makes it "
        "better* the other way round; *mixed* when each is significantly better somewhere; else *no significant "
        f"effect*. **3. Against {study.anchor_name}** at long lengths: *better* when significantly better at every "
        f"long length, *worse* when {study.anchor_name} is significantly better at some long length, else *not "
        "significantly different* (or *better at some lengths*). **4. Chunk count**: rules 1-3 again with each "
        "run's loss at a length read from a subset of the chunks it scored: the same seeded subset "
        "(numpy default_rng([eval-seed, L, N])) for every run; a verdict *flips* when it differs from the verdict "
        "on all the scored chunks; the chunk count *decides a verdict* when any verdict flips at "
        + (f"{fewest} chunks" if fewest else "the fewest chunks")
        + (f" ({theirs.name}'s count)." if theirs and fewest == theirs.chunks else ".")
    )


def subset(documents, chunks: int, mode: str = "nonoverlap") -> list:
    """The result files with each `mode` record reduced to `chunks` of its chunks (the same ones for every
    run at a length: chunk starts are the same in every file of a sweep), loss and stderr recomputed."""
    out = []
    for document in documents:
        records = []
        for record in document["results"]:
            if record["mode"] != mode or "skipped" in record or record["chunks"] <= chunks:
                records.append(record)
                continue
            seed = document.get("evaluation", {}).get("eval_seed") or 0
            pick = np.sort(np.random.default_rng([seed, record["length"], chunks]).choice(
                record["chunks"], size=chunks, replace=False))
            losses = np.asarray(record["chunk_losses"], dtype=np.float64)[pick]
            loss = float(losses.mean())
            records.append({**record, "loss": loss, "ppl": float(np.exp(loss)), "chunks": chunks,
                            "tokens": chunks * record["length"],
                            "stderr": float(losses.std(ddof=1) / np.sqrt(chunks)),
                            "chunk_losses": losses.tolist(),
                            "chunk_starts": [record["chunk_starts"][i] for i in pick]})
        out.append({**document, "results": records})
    return out


def degrades(data: Perplexity, method) -> tuple[bool, str]:
    """Rule 1: (verdict, numbers)."""
    hits, parts = [], []
    for L in data.long:
        ratio = data.ratio(method, L)
        at_T, at_L = data.runs[method][data.T], data.runs[method][L]
        if len(set(at_T) & set(at_L)) < 2:  # one seed: lengths have different chunks, nothing to pair
            parts.append(f"L={L}: {ratio:.3f}x (no test: one seed)")
            continue
        c = compare(at_T, at_L, ALPHA)
        rises = c.over == "seeds" and c.p_value is not None and c.p_value < ALPHA and c.other_loss > c.reference_loss
        parts.append(f"L={L}: {ratio:.3f}x ({p_text(c.p_value if c.over == 'seeds' else None)})")
        if ratio >= DEGRADE_RATIO and rises:
            hits.append(L)
    return bool(hits), "ppl(L) / ppl(T): " + "; ".join(parts)


def switch_verdict(study: Ablation, data: Perplexity, variant) -> tuple[str, str]:
    """Rule 2 for one training variant of the reference."""
    reference = study.method
    ref_better, var_better, parts = data.at_long_lengths(reference, variant, (variant, reference))
    reproduces = (degrades(data, variant)[0] and not degrades(data, reference)[0] and data.long
                  and ref_better == data.long)
    worse = f"makes {study.name} worse at L = {{}}" + (f" (not {study.degradation()})" if study.theirs else "")
    return direction(ref_better, var_better, every="reproduces the degradation" if reproduces else None,
                     worse=worse, better=f"makes {study.name} better at L = {{}}"), \
        f"{variant} vs {reference} ppl: " + "; ".join(parts)


def anchor_verdict(study: Ablation, data, method) -> tuple[str, str]:
    """Rule 3 (R3 by accuracy): one model of the method against the anchor."""
    better, worse, parts = data.at_long_lengths(method, study.anchor, (method, study.anchor))
    word, measure = ("better", "ppl") if isinstance(data, Perplexity) else ("more accurate", "accuracy")
    return (against_anchor(better, worse, data.long, study.anchor_name, word),
            f"{method} vs {study.anchor} {measure}: " + "; ".join(parts))


def _judge(study: Ablation, documents, measure, mode, rules) -> dict:
    """{dataset: rules(data, [the reference and its switches' methods], [the anchor or nothing])} of every
    dataset the rules can judge: the reference ran, trained at one length that was evaluated, with long lengths."""
    out, reference = {}, study.method
    for dataset, data in by_dataset(documents, measure, mode):
        if reference not in data.runs or data.T not in data.lengths or not data.long:
            continue
        variants = [reference] + [f"{reference}+{s}" for s in study.switches if f"{reference}+{s}" in data.runs]
        out[dataset] = rules(data, variants, [study.anchor] if study.anchor in data.runs else [])
    return out


def _switch(study: Ablation, method) -> str:
    return f"switch `{method.removeprefix(study.method + '+')}`"


def verdicts(study: Ablation, documents, mode: str = "nonoverlap") -> dict:
    """{dataset: [(question, verdict, numbers)]} for rules 1-3."""
    def rules(data, variants, anchor):
        degraded = [(method, *degrades(data, method)) for method in variants + anchor]
        return ([(f"1. {m} degrades", "degrades" if hit else "does not degrade", e) for m, hit, e in degraded]
                + [(f"2. {_switch(study, m)}", *switch_verdict(study, data, m)) for m in variants[1:]]
                + [(f"3. {m} against {study.anchor_name}", *anchor_verdict(study, data, m))
                   for m in (variants if anchor else [])])
    return _judge(study, documents, Perplexity, mode, rules)


def chunk_verdicts(study: Ablation, documents, counts, full: int) -> dict:
    """{N: {dataset: rows}} for every chunk count N in `counts` and the full count."""
    return {n: verdicts(study, documents if n == full else subset(documents, n)) for n in [*counts, full]}


def flips(by_count: dict, full: int) -> dict:
    """{N: [(dataset, question, verdict at N, verdict at full)]} for each N below the full count."""
    out = {}
    for n, rows_by_dataset in by_count.items():
        if n == full:
            continue
        out[n] = [(dataset, q, v, dict((q2, v2) for q2, v2, _ in by_count[full][dataset])[q])
                  for dataset, rows in rows_by_dataset.items() for q, v, _ in rows
                  if dataset in by_count[full] and v != dict((q2, v2) for q2, v2, _ in by_count[full][dataset]).get(q)]
    return out


def _answer(by_dataset: dict, rule: str, verdict: str, none: str, found_text: str) -> str:
    """The one-sentence answer from one rule's verdicts: which switches got `verdict`, on which datasets."""
    found = [(d, q.split("`")[1]) for d, rows in by_dataset.items() for q, v, _ in rows
             if q.startswith(rule) and v == verdict]
    return found_text + "; ".join(f"`{s}` on {d}" for d, s in found) + "." if found else none


def answer(study: Ablation, by_dataset: dict) -> str:
    """The answer to "which switch makes the method degrade" from rule 2's verdicts."""
    return _answer(by_dataset, "2.", "reproduces the degradation", "No switch reproduces the degradation at this "
                   "scale.", f"Reproduces {study.degradation()}: ")


# The retrieval variant (configs/reproduce/cpu-mini-retrieval-ablation.yml): the same questions judged by
# kv-retrieval accuracy in place of perplexity, written here before its runs. The other papers measured
# perplexity only, so there is no number of theirs to set beside these.
LOSE_RATIO = 1 / DEGRADE_RATIO   # rule R1: mean acc(L) / acc(T) at a long length at most 0.8
UNLEARNED = 0.05                 # acc(T) at most this: the model never learned the task (retrieval.py's CHANCE)


def retrieval_rules_text(study: Ablation) -> str:
    m, anchor = study.method, study.anchor_name
    counterpart = f" (the retrieval counterpart of {study.degradation()})" if study.theirs else ""
    return (
        f"*Long lengths*: at least {LONG_RATIO}x the training length T. *Accuracy*: greedy exact match of the "
        "answer, over every depth and sample of a length. *Significantly* more or less accurate: the exact McNemar "
        "test (two-sided binomial test on the discordant pairs, the retrieval report's test of claim 4) at α = "
        f"{ALPHA}; two models at one length are paired by (seed, sample): every run scores byte-identical prompts. "
        f"**R1. Loses retrieval**: at some long length L, the accuracy at L (pooled over seeds) is at most "
        f"{LOSE_RATIO:g} x the accuracy at T and significantly below it (pairs: each seed's sample i at T and at L, "
        f"the same depth); a model whose accuracy at T is at most {UNLEARNED:.0%} *did not learn the task* and is "
        "not compared further. Seeds are never dropped: a seed that did not learn counts in its model's accuracy. "
        f"**R2. A switch** (a training variant of {m}, against {m}{study.plain()}): *makes retrieval worse at every "
        f"long length*{counterpart} when the reference is significantly more accurate at every long length; *makes "
        "it worse at some lengths* when the reference is significantly more accurate at some long length and the "
        "variant at none; *makes it better* the other way round; *mixed* when each is significantly more accurate "
        f"somewhere; else *no significant effect*. **R3. Against {anchor}** at long lengths: *better* when "
        f"significantly more accurate at every long length, *worse* when {anchor} is significantly more accurate at "
        "some long length, else *not significantly different* (or *better at some lengths*). The chunk-count "
        "question has no counterpart: every run scores the same probe samples, all of them."
    )


def learned(data: Accuracy, method) -> bool:
    return data.accuracy(method, data.T) > UNLEARNED


def loses_retrieval(data: Accuracy, method) -> tuple[str, str]:
    """Rule R1: (verdict, numbers)."""
    at_T = data.accuracy(method, data.T)
    if not learned(data, method):
        return "did not learn the task", f"accuracy at T = {data.T}: {at_T:.2f}"
    hits, parts = [], []
    for L in data.long:
        ratio = data.accuracy(method, L) / at_T
        x, y = data.pairs(method, data.T, method, L)
        p, only_T, only_L = mcnemar(x, y)
        parts.append(f"L={L}: {data.accuracy(method, L):.2f} ({ratio:.2f}x; {p_text(p)})")
        if ratio <= LOSE_RATIO and p is not None and p < ALPHA and only_T > only_L:
            hits.append(L)
    verdict = f"loses retrieval at L = {hits}" if hits else "keeps retrieval"
    return verdict, f"accuracy at T = {data.T}: {at_T:.2f}; at " + "; ".join(parts)


def retrieval_switch_verdict(study: Ablation, data: Accuracy, variant) -> tuple[str, str]:
    """Rule R2 for one training variant of the reference."""
    reference = study.method
    ref_better, var_better, parts = data.at_long_lengths(reference, variant, (variant, reference))
    every = "makes retrieval worse at every long length" if data.long and ref_better == data.long else None
    return direction(ref_better, var_better, every=every, worse="makes retrieval worse at L = {} only",
                     better="makes retrieval better at L = {}"), \
        f"{variant} vs {reference} accuracy: " + "; ".join(parts)


def retrieval_verdicts(study: Ablation, documents, mode: str = "kv-retrieval") -> dict:
    """{dataset: [(question, verdict, numbers)]} for rules R1-R3 on the `mode` probe records."""
    def rules(data, variants, anchor):
        trained = [m for m in variants if learned(data, m)]
        return ([(f"R1. {m} loses retrieval", *loses_retrieval(data, m)) for m in variants + anchor]
                + [(f"R2. {_switch(study, m)}", *(retrieval_switch_verdict(study, data, m)
                                                   if study.method in trained and m in trained
                                                   else ("not compared", "a model that did not learn the task")))
                   for m in variants[1:]]
                + [(f"R3. {m} against {study.anchor_name}", *anchor_verdict(study, data, m))
                   for m in (trained if anchor and learned(data, study.anchor) else [])])
    return _judge(study, documents, Accuracy, mode, rules)


def retrieval_answer(study: Ablation, by_dataset: dict) -> str:
    """The answer from rule R2's verdicts."""
    return _answer(by_dataset, "R2.", "makes retrieval worse at every long length", f"No switch makes {study.name}'s "
                   "retrieval worse at every long length at this scale.",
                   f"Makes {study.name}'s retrieval worse at every long length: ")
