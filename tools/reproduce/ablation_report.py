"""The ablation's section of the report: the answer, the verdicts of ablation.py's rules, other papers'
numbers of the method beside ours (theirs.py, labelled as theirs), and what the evaluation's chunk count changes."""
import numpy as np

from tools.analysis.probe_table import correct
from tools.analysis.results_index import index_results, method_sort_key
from . import ablation
from .ablation import Ablation
from .figures import PerplexityStyle, accuracy_figure, perplexity_figure, ppl_ratios
from .theirs import reports
from .variants import variant_keys
from .verdicts import verdict_table

Z95 = 1.959964  # two-sided 95% normal quantile


def ablation_section(sweep, documents, figures) -> str:
    """Only for a sweep that says it is an ablation (`ablation:`); its `measure` picks the rules."""
    if not sweep.ablation:
        return ""
    method = sweep.ablation["method"]
    study = Ablation(method, sweep.ablation["anchor"], tuple(sweep.training_variants.get(method, {})))
    if sweep.ablation["measure"] == "kv-retrieval":
        return retrieval_ablation_section(sweep, study, documents, figures)
    full = sweep.evaluation.get("eval_chunks")
    by_count = ablation.chunk_verdicts(study, documents, sweep.chunk_subsets, full)
    main = by_count[full]
    lines = [f"## The ablation: which switch makes {study.name} degrade?\n", f"_Scale: {sweep.scale}_\n",
             f"**Answer ({full} chunks per length): {ablation.answer(study, main)}**\n",
             _switches(sweep, study) + ablation.rules_text(study, min(sweep.chunk_subsets, default=None)) + "\n"]
    for dataset, rows in main.items():
        lines += verdict_table(f"**{dataset}** ({full} chunks per length)\n", rows)
    figures(_figure(documents, sweep, study), "ablation_ppl")
    lines += [_theirs_table(documents, study.method), _figure_line(study)]
    if sweep.chunk_subsets:
        lines.append(_chunk_section(documents, study, by_count, sweep.chunk_subsets, full, figures))
    return "\n".join(lines)


def _switches(sweep, study) -> str:
    keys = variant_keys({study.method: sweep.training_variants[study.method]})
    return (f"The switches, each trained as a run of its own: {keys}; the reference is `{study.method}`"
            + (f" {study.theirs.plain_long}" if study.theirs and study.theirs.plain_long else "")
            + f", the anchor {study.anchor_name}. The rules were written into tools/reproduce/ablation.py and "
            "committed before the runs: ")


def _figure_line(study) -> str:
    theirs = f", with {study.theirs.name}'s" if study.theirs else ""
    return f"![perplexity and its ratio to the training length{theirs}](ablation_ppl.png)\n"


def retrieval_ablation_section(sweep, study, documents, figures, mode: str = "kv-retrieval") -> str:
    """The ablation judged by kv-retrieval accuracy (ablation.retrieval_rules_text), with each seed's accuracy
    (no seed is dropped), the accuracy figure, and, where other papers report the method's perplexity, the same
    models' perplexity beside theirs."""
    main = ablation.retrieval_verdicts(study, documents, mode)
    lines = [f"## The ablation by retrieval: which switch makes {study.name}'s retrieval degrade?\n",
             f"_Scale: {sweep.scale}_\n", f"**Answer: {ablation.retrieval_answer(study, main)}**\n",
             _switches(sweep, study) + ablation.retrieval_rules_text(study) + "\n"]
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
    lines.append("![retrieval accuracy and its ratio to the training length](ablation_retrieval.png)\n")
    if study.theirs:  # their degradation is one of perplexity: the same models' perplexity, beside theirs
        figures(_figure(documents, sweep, study), "ablation_ppl")
        lines += [f"### The same models' perplexity on plain text, beside {study.theirs.name}'s\n",
                  "Not judged by any rule here (the perplexity rules are those of "
                  "configs/reproduce/cpu-mini-ablation.yml, whose models trained on plain text); shown because "
                  f"{study.theirs.name}'s degradation is one of "
                  f"perplexity. {sweep.evaluation.get('eval_chunks')} chunks per length.\n",
                  _theirs_table(documents, study.method), _figure_line(study)]
    return "\n".join(lines)


def _figure(documents, sweep, study):
    """Perplexity and its ratio to the training length, with the cited report's curve and rule 1's threshold."""
    theirs = study.theirs
    return perplexity_figure(documents, PerplexityStyle(
        suptitle=f"{sweep.name}: CPU mini scale (ours)" + (f" — {theirs.name}'s curve is theirs, {theirs.scale}"
                                                          if theirs else ""),
        top_title="{dataset} (ours; shaded: min-max over seeds)",
        bottom_title="{dataset}: ppl(L) / ppl(T)" + (f", with {theirs.name}'s (theirs)" if theirs else ""),
        theirs=theirs and theirs.ppl[study.method][1], theirs_label=theirs.label if theirs else "",
        threshold=(ablation.DEGRADE_RATIO, f"rule 1's threshold ({ablation.DEGRADE_RATIO:g}x)")))


def _theirs_table(documents, method) -> str:
    """ppl(L) / ppl(T) of our runs beside every report of `method` in theirs.py; empty where there is none.
    The first report shows its perplexity and ratio, the others their ratio with the perplexity in brackets, for
    every method they report."""
    if not reports(method):
        return ""
    first, *others = reports(method)
    first_name, first_curve = first.ppl[method]
    columns_theirs = [(r, m) for r in others for m in r.ppl]
    ratios = ppl_ratios(documents)
    factors = sorted(set(first_curve) | {f for r, m in columns_theirs for f in r.ppl[m][1] if m == method}
                     | {f for d in ratios.values() for m in d.values() for f in m})
    columns = [(d, m) for d in ratios for m in ratios[d]]
    head = (f"| L / T | {first.name} {first_name} ppl (theirs) | {first.name} ppl / ppl(T) (theirs) | "
            + "".join(f"{r.name}'s {r.ppl[m][0]} ppl / ppl(T) (theirs) | " for r, m in columns_theirs)
            + " | ".join(f"{m} on {d}" for d, m in columns) + " |")
    rows = [head, "|" + "---|" * (3 + len(columns_theirs) + len(columns))]

    def ratio(curve, f):
        return f"{curve[f] / curve[1]:.3f} ({curve[f]:.2f})" if f in curve else ""

    for f in factors:
        ppl = first_curve.get(f)
        rows.append(f"| {f}× | {f'{ppl:.2f} (L = {f * first.train_length})' if ppl else ''} | "
                    f"{f'{ppl / first_curve[1]:.3f}' if ppl else ''} | "
                    + "".join(f"{ratio(r.ppl[m][1], f)} | " for r, m in columns_theirs)
                    + " | ".join(f"{ratios[d][m][f]:.3f}" if f in ratios[d][m] else "" for d, m in columns) + " |")
    names = [r.name for r in (first, *others)]
    possessive = " and ".join(f"{name}'s" for name in names)
    tokenizers = ", ".join(dict.fromkeys(r.tokenizer for r in (first, *others)))
    ours = max((f for d in ratios.values() for m in d.values() for f in m), default=1)
    return "\n".join([
        f"### {possessive} {first_name} beside ours\n",
        f"The {' and '.join(names)} columns are **theirs**, not this project's: {first.source}"
        + "".join(f"; and {r.source} (perplexity in brackets; {max(r.ppl[method][1])}× is their longest length)"
                  for r in others)
        + f". {'Both at other scales' if len(names) == 2 else 'All at other scales' if others else 'At another scale'} "
        f"than ours ({tokenizers}, "
        f"{' and '.join(r.model for r in (first, *others))}); to compare the shape of the curves, each is divided by "
        "its own perplexity at the training length T. Our columns: mean over seeds of ppl(L) / ppl(T), "
        f"non-overlapping chunks. {first.name} evaluated up to {max(first_curve)}×"
        + "".join(f", {r.name} to {max(r.ppl[method][1])}×" for r in others) + f"; we evaluate up to {ours}×.\n",
        *rows, ""])


def _chunk_figure(documents, study, counts, full):
    """ppl(L) / ppl(T) of every model of the method and the anchor read from N chunks: one panel per chunk count."""
    from tools.analysis.plot_common import plt
    ratios = {n: ppl_ratios(documents if n == full else ablation.subset(documents, n)) for n in counts}
    datasets = sorted(ratios[full])
    methods = list(dict.fromkeys(m for d in datasets for m in ratios[full][d]))  # Table 3's order, as _figure
    colours = dict(zip(methods, plt.get_cmap("tab10").colors))
    fig, axes = plt.subplots(len(datasets), len(counts), figsize=(4.2 * len(counts), 3.4 * len(datasets)),
                             squeeze=False, sharey=True)
    for row, dataset in enumerate(datasets):
        for column, n in enumerate(counts):
            ax = axes[row][column]
            for method in methods:
                curve = ratios[n][dataset].get(method, {})
                ax.plot(sorted(curve), [curve[f] for f in sorted(curve)], marker="o", markersize=3,
                        color=colours[method], linestyle="--" if "bf16" in method else "-", label=method)
            if study.theirs:
                curve = study.theirs.ppl[study.method][1]
                ax.plot(list(curve), [p / curve[1] for p in curve.values()], color="black", linestyle=":", marker="s",
                        markersize=3, label=f"{study.theirs.name} (theirs)")
            ax.axhline(ablation.DEGRADE_RATIO, color="grey", linewidth=0.8, linestyle="--")
            ax.axhline(1.0, color="grey", linewidth=0.8)
            factors = sorted(ratios[full][dataset][study.method])
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
    theirs = f"; {study.theirs.name}'s curve is theirs" if study.theirs else ""
    fig.suptitle(f"The same runs read from fewer chunks (ours, CPU mini scale{theirs})", fontsize=10)
    fig.tight_layout()
    return fig


def _chunk_section(documents, study, by_count, counts, full, figures) -> str:
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
    figures(_chunk_figure(documents, study, counts, full), "ablation_chunks")
    lines.append(f"\n![ppl(L) / ppl(T) read from {', '.join(map(str, counts[:-1]))} and {counts[-1]} chunks]"
                 "(ablation_chunks.png)\n")
    decides = bool(flipped.get(min(counts)))
    lines.append(f"\n**Does the chunk count decide a verdict?** {'Yes' if decides else 'No'}: at {min(counts)} chunks "
                 f"{'some verdicts differ from those' if decides else 'every verdict is the same as'} at {full}.\n")
    return "\n".join(lines)
