"""Which switch makes KERPLE-log degrade (issue 28): its questions, judged by fixed rules written here
before the runs (ABLATION_RULES), like the paper's claims in claims.py.

An independent reproduction (DAPE-V2, ACL 2025: their GPT-NeoX fork, 125M model, trained at 512 tokens on
ArXiv, KERPLE parameters per layer, fp16, 20 evaluation batches) reports KERPLE-log's perplexity rising
with length (DAPE_V2 below), where the KERPLE paper's stays flat. The sweep trains KERPLE-log with each
of the fork's switches this project can set (`training_variants`, reported as `kerple_log+<label>`)
beside the plain run (shared parameters, fp32: the reference) and ALiBi (the anchor), and scores every
run on the same chunks. Three questions, per dataset:

1. Degradation: does a model's perplexity rise with length as DAPE-V2's KERPLE-log does?
2. Switch: does a switch make KERPLE-log worse at long lengths than the reference, and does it
   reproduce the degradation?
3. Anchor: is each KERPLE-log variant at least as good as ALiBi at long lengths?
and, over all of them, 4. Chunk count: does any verdict change when a run's perplexity is read from
20 or 64 of its chunks (`chunk_subsets`) instead of all it scored (320, the paper's count)?

Pure functions of the result files over the one verdict engine (verdicts.py: the tests, the pairing, the
verdict words); tests/reproduce/test_reproduce_ablation.py makes each verdict come out each way.
"""
import numpy as np

from tools.analysis.significance import compare, mcnemar
from .verdicts import ALPHA, LONG_RATIO, Accuracy, Perplexity, against_anchor, by_dataset, direction, p_text

DEGRADE_RATIO = 1.25   # rule 1: mean ppl(L) / ppl(T) at a long length; DAPE-V2's KERPLE: 1.49 at 8x, 1.99 at 16x
REFERENCE, ANCHOR = "kerple_log", "alibi"

# DAPE-V2 (Zheng et al., ACL 2025), KERPLE row: their numbers, not this project's; a different scale.
DAPE_V2 = {
    "source": "DAPE-V2 (ACL 2025), KERPLE-log: 125M model, trained at 512 tokens on ArXiv, their GPT-NeoX fork "
              "with per-layer KERPLE parameters, fp16 training, 20 evaluation batches",
    "train_length": 512,
    "ppl": {512: 4.57, 1024: 4.37, 2048: 5.09, 4096: 6.80, 8192: 9.08},
}

# A second, independent report of KERPLE degrading (arXiv 2503.08067, CABLE, Table 2's reproduction), also
# theirs: its ladder is not powers of two, so it is keyed by L / T.
CABLE = {
    "source": "CABLE (arXiv 2503.08067), their own reproduction: GPT-2 Medium, trained at 1,024 tokens on "
              "FineWeb-Edu",
    "train_length": 1024,
    "kerple_ppl": {1: 16.70, 4: 16.78, 8: 20.32, 15: 26.13},
    "alibi_ppl": {1: 16.79, 15: 17.46},
}

ABLATION_RULES = (
    f"*Long lengths*: at least {LONG_RATIO}x the training length T. *Significantly* better or worse: a paired "
    f"two-sided t-test on loss over seeds (α = {ALPHA}), the test of Table 3. "
    f"**1. Degrades** (the DAPE-V2 pattern): at some long length L, the mean over seeds of ppl(L) / ppl(T) is at "
    f"least {DEGRADE_RATIO:g} (DAPE-V2's KERPLE-log: 1.49 at 8x, 1.99 at 16x) and the loss at L is significantly "
    "above the loss at T (pairs: each seed's two losses). **2. A switch** (a training variant of kerple_log, "
    "against kerple_log with shared parameters in fp32): *reproduces the degradation* when the variant degrades, "
    "the reference does not, and the reference is significantly better at every long length; *makes KERPLE-log "
    "worse* when the reference is significantly better at some long length and the variant at none; *makes it "
    "better* the other way round; *mixed* when each is significantly better somewhere; else *no significant "
    "effect*. **3. Against ALiBi** at long lengths: *better* when significantly better at every long length, "
    "*worse* when ALiBi is significantly better at some long length, else *not significantly different* (or "
    "*better at some lengths*). **4. Chunk count**: rules 1-3 again with each run's loss at a length read from a "
    "subset of the chunks it scored: the same seeded subset (numpy default_rng([eval-seed, L, N])) for every "
    "run; a verdict *flips* when it differs from the verdict on all the scored chunks; the chunk count "
    "*decides a verdict* when any verdict flips at 20 chunks (DAPE-V2's count)."
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


def switch_verdict(data: Perplexity, variant) -> tuple[str, str]:
    """Rule 2 for one training variant of the reference."""
    ref_better, var_better, parts = data.at_long_lengths(REFERENCE, variant, (variant, REFERENCE))
    reproduces = (degrades(data, variant)[0] and not degrades(data, REFERENCE)[0] and data.long
                  and ref_better == data.long)
    return direction(ref_better, var_better, every="reproduces the degradation" if reproduces else None,
                     worse="makes KERPLE-log worse at L = {} (not the DAPE-V2 degradation)",
                     better="makes KERPLE-log better at L = {}"), f"{variant} vs {REFERENCE} ppl: " + "; ".join(parts)


def anchor_verdict(data: Perplexity, method) -> tuple[str, str]:
    """Rule 3: one KERPLE-log model against ALiBi."""
    better, worse, parts = data.at_long_lengths(method, ANCHOR, (method, ANCHOR))
    return against_anchor(better, worse, data.long, "ALiBi", "better"), f"{method} vs {ANCHOR} ppl: " + "; ".join(parts)


def _judge(documents, measure, switches, mode, rules) -> dict:
    """{dataset: rules(data, [the reference and its switches' methods], [the anchor or nothing])} of every
    dataset the rules can judge: the reference ran, trained at one length that was evaluated, with long lengths."""
    out = {}
    for dataset, data in by_dataset(documents, measure, mode):
        if REFERENCE not in data.runs or data.T not in data.lengths or not data.long:
            continue
        kerple = [REFERENCE] + [f"{REFERENCE}+{s}" for s in switches if f"{REFERENCE}+{s}" in data.runs]
        out[dataset] = rules(data, kerple, [ANCHOR] if ANCHOR in data.runs else [])
    return out


def _switch(method) -> str:
    return f"switch `{method.removeprefix(REFERENCE + '+')}`"


def verdicts(documents, switches, mode: str = "nonoverlap") -> dict:
    """{dataset: [(question, verdict, numbers)]} for rules 1-3; `switches` are the labels of the
    reference's training variants (their methods are `kerple_log+<label>`)."""
    def rules(data, kerple, anchor):
        degraded = [(method, *degrades(data, method)) for method in kerple + anchor]
        return ([(f"1. {m} degrades", "degrades" if hit else "does not degrade", e) for m, hit, e in degraded]
                + [(f"2. {_switch(m)}", *switch_verdict(data, m)) for m in kerple[1:]]
                + [(f"3. {m} against ALiBi", *anchor_verdict(data, m)) for m in (kerple if anchor else [])])
    return _judge(documents, Perplexity, switches, mode, rules)


def chunk_verdicts(documents, switches, counts, full: int) -> dict:
    """{N: {dataset: rows}} for every chunk count N in `counts` and the full count."""
    return {n: verdicts(documents if n == full else subset(documents, n), switches) for n in [*counts, full]}


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


def answer(by_dataset: dict) -> str:
    """The answer to "which switch makes KERPLE degrade" from rule 2's verdicts."""
    return _answer(by_dataset, "2.", "reproduces the degradation", "No switch reproduces the degradation at this "
                   "scale.", "Reproduces the DAPE-V2 degradation: ")


# The retrieval variant (configs/reproduce/cpu-mini-retrieval-ablation.yml): the same questions judged by
# kv-retrieval accuracy in place of perplexity, written here before its runs. DAPE-V2 measured perplexity
# only, so there is no number of theirs to set beside these.
LOSE_RATIO = 1 / DEGRADE_RATIO   # rule R1: mean acc(L) / acc(T) at a long length at most 0.8
UNLEARNED = 0.05                 # acc(T) at most this: the model never learned the task (retrieval.py's CHANCE)

RETRIEVAL_ABLATION_RULES = (
    f"*Long lengths*: at least {LONG_RATIO}x the training length T. *Accuracy*: greedy exact match of the answer, "
    "over every depth and sample of a length. *Significantly* more or less accurate: the exact McNemar test "
    "(two-sided binomial test on the discordant pairs, the retrieval report's test of claim 4) at α = "
    f"{ALPHA}; two models at one length are paired by (seed, sample): every run scores byte-identical prompts. "
    f"**R1. Loses retrieval**: at some long length L, the accuracy at L (pooled over seeds) is at most "
    f"{LOSE_RATIO:g} x the accuracy at T and significantly below it (pairs: each seed's sample i at T and at L, "
    f"the same depth); a model whose accuracy at T is at most {UNLEARNED:.0%} *did not learn the task* and is "
    "not compared further. Seeds are never dropped: a seed that did not learn counts in its model's accuracy. **R2. A switch** (a training variant of kerple_log, against kerple_log with shared "
    "parameters in fp32): *makes retrieval worse at every long length* (the retrieval counterpart of the "
    "DAPE-V2 degradation) when the reference is significantly more accurate at every long length; *makes it "
    "worse at some lengths* when the reference is significantly more accurate at some long length and the "
    "variant at none; *makes it better* the other way round; *mixed* when each is significantly more accurate "
    "somewhere; else *no significant effect*. **R3. Against ALiBi** at long lengths: *better* when "
    "significantly more accurate at every long length, *worse* when ALiBi is significantly more accurate at "
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


def retrieval_switch_verdict(data: Accuracy, variant) -> tuple[str, str]:
    """Rule R2 for one training variant of the reference."""
    ref_better, var_better, parts = data.at_long_lengths(REFERENCE, variant, (variant, REFERENCE))
    every = "makes retrieval worse at every long length" if data.long and ref_better == data.long else None
    return direction(ref_better, var_better, every=every, worse="makes retrieval worse at L = {} only",
                     better="makes retrieval better at L = {}"), \
        f"{variant} vs {REFERENCE} accuracy: " + "; ".join(parts)


def retrieval_anchor_verdict(data: Accuracy, method) -> tuple[str, str]:
    """Rule R3: one KERPLE-log model against ALiBi."""
    better, worse, parts = data.at_long_lengths(method, ANCHOR, (method, ANCHOR))
    return (against_anchor(better, worse, data.long, "ALiBi", "more accurate"),
            f"{method} vs {ANCHOR} accuracy: " + "; ".join(parts))


def retrieval_verdicts(documents, switches, mode: str = "kv-retrieval") -> dict:
    """{dataset: [(question, verdict, numbers)]} for rules R1-R3 on the `mode` probe records."""
    def rules(data, kerple, anchor):
        trained = [m for m in kerple if learned(data, m)]
        return ([(f"R1. {m} loses retrieval", *loses_retrieval(data, m)) for m in kerple + anchor]
                + [(f"R2. {_switch(m)}", *(retrieval_switch_verdict(data, m) if REFERENCE in trained and m in trained
                                            else ("not compared", "a model that did not learn the task")))
                   for m in kerple[1:]]
                + [(f"R3. {m} against ALiBi", *retrieval_anchor_verdict(data, m))
                   for m in (trained if anchor and learned(data, ANCHOR) else [])])
    return _judge(documents, Accuracy, switches, mode, rules)


def retrieval_answer(by_dataset: dict) -> str:
    """The answer from rule R2's verdicts."""
    return _answer(by_dataset, "R2.", "makes retrieval worse at every long length", "No switch makes KERPLE-log's "
                   "retrieval worse at every long length at this scale.",
                   "Makes KERPLE-log's retrieval worse at every long length: ")
