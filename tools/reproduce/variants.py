"""A sweep's training variants beside their parent method, for a sweep that is not an ablation (no
`ablation:` key): each variant against the same method without the variant's keys, at every length, by the
paired tests the report already uses. A description: no rule was written for these, so no verdict."""
import json

import numpy as np

from tools.analysis.probe_table import probe_modes
from tools.analysis.results_index import index_results, train_lengths
from .ablation import ALPHA, _Data, _Probes, _p


def variants_section(sweep, documents, figures) -> str:
    if not sweep.training_variants or sweep.ablation:
        return ""
    keys = "; ".join(f"`{method}+{label}`: " + ", ".join(f"{k.replace('_', '-')}: {json.dumps(v)}" for k, v in entry.items())
                     for method, entries in sweep.training_variants.items() for label, entry in entries.items())
    modes = probe_modes(documents)
    lines = ["## Training variants beside their parent method\n", f"_Scale: {sweep.scale}_\n",
             f"Each variant is a run of its own, trained with its method's settings plus its keys ({keys}). Here it "
             "stands beside its parent (the same method without those keys) at every evaluation length, by the "
             f"paired tests of Table 3: perplexity from the loss, paired t-test over seeds, α = {ALPHA}"
             + (" — and of the retrieval section: accuracy, exact McNemar test over (seed, sample) pairs"
                if modes else "")
             + ". *Lower* / *higher*: significantly so; *–*: no significant difference. A description, not a "
             "verdict: the sweep states no rule for these comparisons.\n"]
    trained = train_lengths(documents)
    ppl = index_results(documents, "nonoverlap")
    probes = {mode: index_results(documents, mode) for mode in modes}
    for dataset in sorted(ppl):
        T = trained.get(dataset)
        if T is None:  # runs trained at different lengths: no shared T to pair at
            continue
        data = _Data({str(m): v for m, v in ppl[dataset].items()}, T)
        head = "| variant | parent | L | ppl: parent | ppl: variant | p | variant's ppl |"
        rule = "|---|---|---|---|---|---|---|"
        for mode in modes:
            head += f" {mode} accuracy: parent | variant | McNemar p | variant's accuracy |"
            rule += "---|---|---|---|"
        rows = []
        for method, entries in sweep.training_variants.items():
            for label in entries:
                variant = f"{method}+{label}"
                if method not in data.runs or variant not in data.runs:
                    continue
                for L in data.lengths:
                    parent_better, variant_better, p = data.better(method, variant, L)
                    cells = [variant, method, str(L), f"{data.ppl(method, L):.4g}", f"{data.ppl(variant, L):.4g}", _p(p),
                             _direction(variant_better, parent_better, "lower", "higher")]
                    for mode in modes:
                        runs = {str(m): v for m, v in probes[mode].get(dataset, {}).items()}
                        if L not in runs.get(method, {}) or L not in runs.get(variant, {}):
                            cells += ["", "", "", ""]
                            continue
                        probe = _Probes(runs, T)
                        parent_acc, variant_acc, p_acc = probe.better(method, variant, L)
                        cells += [f"{probe.accuracy(method, L):.2f}", f"{probe.accuracy(variant, L):.2f}", _p(p_acc),
                                  _direction(variant_acc, parent_acc, "higher", "lower")]
                    rows.append("| " + " | ".join(cells) + " |")
        if rows:
            lines += [f"**{dataset}** (T = {T}; perplexity and accuracy: mean over seeds)\n", head, rule, *rows, ""]
    return "\n".join(lines)


def _direction(variant_better: bool, parent_better: bool, better: str, worse: str) -> str:
    return f"**{better}**" if variant_better else f"**{worse}**" if parent_better else "–"


def variants_figure(documents, sweep):
    """Perplexity against length (top) and its ratio to the training length (bottom), one line per method
    and variant: a variant in its own colour, dashed."""
    from matplotlib.ticker import NullLocator
    from tools.analysis.plot_common import plain_numbers, plt
    from tools.analysis.results_index import method_sort_key
    from .ablation_report import _ratios
    index, ratios = index_results(documents, "nonoverlap"), _ratios(documents)
    datasets = sorted(index)
    methods = sorted({m for d in index.values() for m in d}, key=method_sort_key)
    colours = dict(zip(methods, plt.get_cmap("tab10").colors + plt.get_cmap("Dark2").colors))
    fig, axes = plt.subplots(2, len(datasets), figsize=(5.5 * len(datasets), 8), squeeze=False)
    for column, dataset in enumerate(datasets):
        top, bottom = axes[0][column], axes[1][column]
        for method in methods:
            runs = index[dataset].get(method)
            if not runs:
                continue
            lengths = sorted(runs)
            ppl = np.array([[r["ppl"] for r in runs[L].values()] for L in lengths])
            style = dict(color=colours[method], marker="o", linestyle="--" if "+" in str(method) else "-")
            top.plot(lengths, ppl.mean(axis=1), label=f"{method} ({ppl.shape[1]} seeds)", **style)
            top.fill_between(lengths, ppl.min(axis=1), ppl.max(axis=1), color=colours[method], alpha=0.12)
            factors = sorted(ratios[dataset][str(method)])
            bottom.plot(factors, [ratios[dataset][str(method)][f] for f in factors], label=str(method), **style)
        top.set_title(f"{dataset} (shaded: min-max over seeds)")
        top.set_xlabel("evaluation length L (tokens)")
        top.set_ylabel("perplexity (nonoverlap)")
        top.set_yscale("log")
        bottom.set_title(f"{dataset}: ppl(L) / ppl(T)")
        bottom.set_xlabel("L / training length T")
        bottom.set_ylabel("ppl(L) / ppl(T), mean over seeds")
        bottom.axhline(1.0, color="grey", linewidth=0.8)
        lengths = sorted({L for m in index[dataset].values() for L in m})
        factors = sorted({f for m in ratios[dataset].values() for f in m})
        if max(v for m in ratios[dataset].values() for v in m.values()) > 10:  # a method that blows up
            bottom.set_yscale("log")
        for ax, ticks, text in ((top, lengths, str), (bottom, factors, lambda f: f"{f}x")):
            ax.set_xscale("log", base=2)
            ax.set_xticks(ticks, [text(t) for t in ticks])
            ax.xaxis.set_minor_locator(NullLocator())
            if ax.get_yscale() == "log":
                plain_numbers(ax.yaxis)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.suptitle(f"{sweep.name}: perplexity by length, training variants dashed (CPU mini scale)", fontsize=10)
    fig.tight_layout()
    return fig
