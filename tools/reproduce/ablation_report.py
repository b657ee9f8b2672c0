"""The ablation's section of the report (issue 28): the answer, the verdicts of ablation.py's rules, DAPE-V2's
numbers beside ours (labelled as theirs), and what the evaluation's chunk count changes."""
import numpy as np

from tools.analysis.probe_table import correct
from tools.analysis.results_index import index_results, method_sort_key
from . import ablation
from .ablation import CABLE, DAPE_V2, REFERENCE
from .figures import PerplexityStyle, accuracy_figure, perplexity_figure, ppl_ratios
from .variants import variant_keys
from .verdicts import verdict_table

Z95 = 1.959964  # two-sided 95% normal quantile


def ablation_section(sweep, documents, figures) -> str:
    """Only for a sweep that says it is an ablation (`ablation:`); its `measure` picks the rules."""
    if not sweep.ablation:
        return ""
    if sweep.ablation["measure"] == "kv-retrieval":
        return retrieval_ablation_section(sweep, documents, figures)
    switches = list(sweep.training_variants.get(REFERENCE, {}))
    full = sweep.evaluation.get("eval_chunks")
    by_count = ablation.chunk_verdicts(documents, switches, sweep.chunk_subsets, full)
    main = by_count[full]
    keys = variant_keys({REFERENCE: sweep.training_variants[REFERENCE]})
    lines = ["## The ablation: which switch makes KERPLE-log degrade?\n", f"_Scale: {sweep.scale}_\n",
             f"**Answer ({full} chunks per length): {ablation.answer(main)}**\n",
             f"The switches, each trained as a run of its own: {keys}; the reference is `{REFERENCE}` as the "
             "paper trains it (one set of kernel parameters shared by the layers, fp32), the anchor ALiBi. "
             "The rules were written into tools/reproduce/ablation.py and committed before the runs: "
             + ablation.ABLATION_RULES + "\n"]
    for dataset, rows in main.items():
        lines += verdict_table(f"**{dataset}** ({full} chunks per length)\n", rows)
    figures(_figure(documents, sweep), "ablation_ppl")
    lines += [_dape_table(documents), "![perplexity and its ratio to the training length, with DAPE-V2's](ablation_ppl.png)\n"]
    if sweep.chunk_subsets:
        lines.append(_chunk_section(documents, by_count, sweep.chunk_subsets, full, figures))
    return "\n".join(lines)


def retrieval_ablation_section(sweep, documents, figures, mode: str = "kv-retrieval") -> str:
    """The ablation judged by kv-retrieval accuracy (ablation.RETRIEVAL_ABLATION_RULES), with each seed's
    accuracy (no seed is dropped), the accuracy figure, and the same models' perplexity beside DAPE-V2's."""
    switches = list(sweep.training_variants.get(REFERENCE, {}))
    main = ablation.retrieval_verdicts(documents, switches, mode)
    keys = variant_keys({REFERENCE: sweep.training_variants[REFERENCE]})
    lines = ["## The ablation by retrieval: which switch makes KERPLE-log's retrieval degrade?\n",
             f"_Scale: {sweep.scale}_\n", f"**Answer: {ablation.retrieval_answer(main)}**\n",
             f"The switches, each trained as a run of its own: {keys}; the reference is `{REFERENCE}` "
             "as the paper trains it (one set of kernel parameters shared by the layers, fp32), the anchor ALiBi. "
             "The rules were written into tools/reproduce/ablation.py and committed before the runs: "
             + ablation.RETRIEVAL_ABLATION_RULES + "\n"]
    index = index_results(documents, mode)
    for dataset, rows in main.items():
        lines += verdict_table(f"**{dataset}** (`{mode}`)\n", rows)
        runs = index[dataset]
        methods = sorted(runs, key=method_sort_key)
        lengths = sorted({L for m in runs.values() for L in m})
        seeds = sorted({s for m in runs.values() for by_seed in m.values() for s in by_seed})
        lines += [f"Accuracy of each seed ({', '.join(map(str, seeds))}), by length:\n",
                  "| method | " + " | ".join(map(str, lengths)) + " |", "|---|" + "---|" * len(lengths)]
        for method in methods:
            lines.append(f"| {method} | " + " | ".join(
                " / ".join(f"{correct(runs[method][L][s]).mean():.2f}" if s in runs[method].get(L, {}) else "–" for s in seeds)
                for L in lengths) + " |")
        lines.append("")
    figures(accuracy_figure(index, mode, f"{sweep.name}: retrieval at CPU mini scale (ours; neither paper has a "
                            "retrieval probe)", (ablation.LOSE_RATIO, f"rule R1's threshold ({ablation.LOSE_RATIO:g}x)")),
            "ablation_retrieval")
    figures(_figure(documents, sweep), "ablation_ppl")
    lines += ["![retrieval accuracy and its ratio to the training length](ablation_retrieval.png)\n",
              "### The same models' perplexity on plain text, beside DAPE-V2's\n",
              "Not judged by any rule here (the perplexity rules are those of configs/reproduce/cpu-mini-ablation.yml, "
              "whose models trained on plain text); shown because DAPE-V2's degradation is one of perplexity. "
              f"{sweep.evaluation.get('eval_chunks')} chunks per length.\n",
              _dape_table(documents), "![perplexity and its ratio to the training length, with DAPE-V2's](ablation_ppl.png)\n"]
    return "\n".join(lines)


def _figure(documents, sweep):
    """Perplexity and its ratio to the training length, with DAPE-V2's curve and rule 1's threshold."""
    return perplexity_figure(documents, PerplexityStyle(
        suptitle=f"{sweep.name}: CPU mini scale (ours) — DAPE-V2's curve is theirs, at 125M / 512 tokens",
        top_title="{dataset} (ours; shaded: min-max over seeds)",
        bottom_title="{dataset}: ppl(L) / ppl(T), with DAPE-V2's (theirs)", theirs=DAPE_V2,
        theirs_label="DAPE-V2 KERPLE-log (theirs: 125M, ArXiv, T=512)",
        threshold=(ablation.DEGRADE_RATIO, f"rule 1's threshold ({ablation.DEGRADE_RATIO:g}x)")))


def _dape_table(documents) -> str:
    T = DAPE_V2["train_length"]
    theirs = {L // T: ppl for L, ppl in DAPE_V2["ppl"].items()}
    cable_kerple, cable_alibi = CABLE["kerple_ppl"], CABLE["alibi_ppl"]
    ratios = ppl_ratios(documents)
    factors = sorted(set(theirs) | set(cable_kerple) | {f for d in ratios.values() for m in d.values() for f in m})
    columns = [(d, m) for d in ratios for m in ratios[d]]
    head = ("| L / T | DAPE-V2 KERPLE-log ppl (theirs) | DAPE-V2 ppl / ppl(T) (theirs) | CABLE's KERPLE ppl / "
            "ppl(T) (theirs) | CABLE's ALiBi ppl / ppl(T) (theirs) | "
            + " | ".join(f"{m} on {d}" for d, m in columns) + " |")
    rows = [head, "|" + "---|" * (5 + len(columns))]

    def ratio(table, f):
        return f"{table[f] / table[1]:.3f} ({table[f]:.2f})" if f in table else ""

    for f in factors:
        dape = theirs.get(f)
        rows.append(f"| {f}× | {f'{dape:.2f} (L = {f * T})' if dape else ''} | {f'{dape / theirs[1]:.3f}' if dape else ''} | "
                    f"{ratio(cable_kerple, f)} | {ratio(cable_alibi, f)} | "
                    + " | ".join(f"{ratios[d][m][f]:.3f}" if f in ratios[d][m] else "" for d, m in columns) + " |")
    return "\n".join([
        "### DAPE-V2's and CABLE's KERPLE-log beside ours\n",
        f"The DAPE-V2 and CABLE columns are **theirs**, not this project's: {DAPE_V2['source']}; and "
        f"{CABLE['source']} (perplexity in brackets; 15× is their longest length). Both at other scales than "
        "ours (GPT-2 BPE, 125M and GPT-2 Medium); to compare the shape of the curves, each is divided by its own "
        "perplexity at the training length T. Our columns: mean over seeds of ppl(L) / ppl(T), non-overlapping "
        "chunks. DAPE-V2 evaluated up to 16×, CABLE to 15×; we evaluate up to 32×.\n", *rows, ""])


def _chunk_figure(documents, counts, full):
    """ppl(L) / ppl(T) of every KERPLE-log model and ALiBi read from N chunks: one panel per chunk count."""
    from tools.analysis.plot_common import plt
    ratios = {n: ppl_ratios(documents if n == full else ablation.subset(documents, n)) for n in counts}
    datasets = sorted(ratios[full])
    methods = list(dict.fromkeys(m for d in datasets for m in ratios[full][d]))  # Table 3's order, as _figure
    colours = dict(zip(methods, plt.get_cmap("tab10").colors))
    T = DAPE_V2["train_length"]
    fig, axes = plt.subplots(len(datasets), len(counts), figsize=(4.2 * len(counts), 3.4 * len(datasets)),
                             squeeze=False, sharey=True)
    for row, dataset in enumerate(datasets):
        for column, n in enumerate(counts):
            ax = axes[row][column]
            for method in methods:
                curve = ratios[n][dataset].get(method, {})
                ax.plot(sorted(curve), [curve[f] for f in sorted(curve)], marker="o", markersize=3,
                        color=colours[method], linestyle="--" if "bf16" in method else "-", label=method)
            ax.plot([L // T for L in DAPE_V2["ppl"]], [p / DAPE_V2["ppl"][T] for p in DAPE_V2["ppl"].values()],
                    color="black", linestyle=":", marker="s", markersize=3, label="DAPE-V2 (theirs)")
            ax.axhline(ablation.DEGRADE_RATIO, color="grey", linewidth=0.8, linestyle="--")
            ax.axhline(1.0, color="grey", linewidth=0.8)
            factors = sorted(ratios[full][dataset][REFERENCE])
            ax.set_xscale("log", base=2)
            ax.set_xticks(factors, [f"{f}x" for f in factors])
            ax.minorticks_off()
            ax.grid(True, alpha=0.3)
            ax.set_title(f"{dataset}: {n} chunks per length" + (" (all scored)" if n == full else ""), fontsize=9)
            if column == 0:
                ax.set_ylabel("ppl(L) / ppl(T), mean over seeds")
            if row == len(datasets) - 1:
                ax.set_xlabel("L / training length T")
    axes[0][-1].legend(fontsize=6)
    fig.suptitle("The same runs read from fewer chunks (ours, CPU mini scale; DAPE-V2's curve is theirs)", fontsize=10)
    fig.tight_layout()
    return fig


def _chunk_section(documents, by_count, counts, full, figures) -> str:
    counts = [*counts, full]
    index = {n: index_results(documents if n == full else ablation.subset(documents, n), "nonoverlap") for n in counts}
    lines = ["### The evaluation's chunk count\n",
             f"Every run scored {full} chunks per length; the {', '.join(map(str, counts[:-1]))}-chunk columns re-read "
             "each run from a seeded subset of those chunks (the same subset for every run and seed), not from "
             "separate evaluations. *CI*: the median over runs of the half-width of a run's 95% confidence interval "
             "of perplexity from its chunks, exp(1.96 × stderr of the chunk losses) − 1, in percent. *Seed spread*: "
             "the median over models of the standard deviation over seeds of ppl, in percent of the mean.\n"]
    for dataset in sorted(index[full]):
        head = " | ".join(f"CI at {n} | seed spread at {n}" for n in counts)
        lines += [f"**{dataset}**\n", f"| L | {head} |", "|---|" + "---|" * (2 * len(counts))]
        for L in sorted({L for m in index[full][dataset].values() for L in m}):
            cells = []
            for n in counts:
                runs = index[n][dataset]
                ci = [np.expm1(Z95 * r["stderr"]) for m in runs.values() for r in m.get(L, {}).values() if r.get("stderr")]
                spread = [np.std([r["ppl"] for r in m[L].values()], ddof=1) / np.mean([r["ppl"] for r in m[L].values()])
                          for m in runs.values() if len(m.get(L, {})) > 1]
                cells += [f"±{100 * np.median(ci):.1f}%" if ci else "", f"{100 * np.median(spread):.1f}%" if spread else ""]
            lines.append(f"| {L} | " + " | ".join(cells) + " |")
        lines.append("")
    flipped = ablation.flips(by_count, full)
    lines += [f"Verdicts of rules 1-3 at each chunk count (a flip is a verdict that differs from the one at {full}):\n",
              "| dataset | question | " + " | ".join(f"{n} chunks" for n in counts) + " |",
              "|---|---|" + "---|" * len(counts)]
    for dataset, rows in by_count[full].items():
        for question, _, _ in rows:
            verdicts = [dict((q, v) for q, v, _ in by_count[n].get(dataset, [])).get(question, "") for n in counts]
            lines.append(f"| {dataset} | {question} | " + " | ".join(
                f"**{v}** (flips)" if v != verdicts[-1] else v for v in verdicts) + " |")
    lines.append("")
    for n, changed in flipped.items():
        lines.append(f"- At {n} chunks: " + (f"{len(changed)} verdict{'s flip' if len(changed) > 1 else ' flips'}: " + "; ".join(
            f"{d}, {q}: {v} (at {full}: {w})" for d, q, v, w in changed) if changed else "no verdict flips") + ".")
    figures(_chunk_figure(documents, counts, full), "ablation_chunks")
    lines.append("\n![ppl(L) / ppl(T) read from 20, 64 and 320 chunks](ablation_chunks.png)\n")
    decides = bool(flipped.get(min(counts)))
    lines.append(f"\n**Does the chunk count decide a verdict?** {'Yes' if decides else 'No'}: at {min(counts)} chunks "
                 f"{'some verdicts differ from those' if decides else 'every verdict is the same as'} at {full}.\n")
    return "\n".join(lines)
