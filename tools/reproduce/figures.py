"""The study reports' figure of a measure against length: one column per dataset, the measure against the
evaluation length on top and its ratio to the value at the training length below, a colour per method.

The ablation (with another paper's curve of the method, theirs.py, and rule 1's threshold), the retrieval
ablation (accuracy, each seed
drawn thin) and the training variants beside their parents (variants dashed, log axes) are this one figure
with other data: what differs is passed in (`PerplexityStyle`), the drawing is written once.
"""
import dataclasses

import numpy as np

from megatron.evaluation.identity import Method
from tools.analysis.results_index import index_results, method_sort_key


def ppl_ratios(documents) -> dict:
    """{dataset: {method: {L / T: mean over seeds of ppl(L) / ppl(T)}}} (nonoverlap), T each method's own
    training length (an extension's is longer than its base model's)."""
    out = {}
    trained = {(d["run"]["dataset"], Method.of_run(d["run"])): d["run"]["train_length"] for d in documents}
    for dataset, runs in sorted(index_results(documents, "nonoverlap").items()):  # not the files' order
        for method in sorted(runs, key=method_sort_key):
            T = trained[dataset, method]
            at_T = runs[method].get(T, {})
            out.setdefault(dataset, {})[str(method)] = {
                L // T: float(np.mean([runs[method][L][s]["ppl"] / at_T[s]["ppl"] for s in at_T if s in runs[method][L]]))
                for L in sorted(runs[method]) if at_T and L >= T}  # below T (an extension at 64): no ratio drawn
    return out


def grid(index, palette):
    """(datasets, methods, colours, figure, axes): two rows, a column per dataset of {dataset: {method: ..}}."""
    from tools.analysis.plot_common import plt
    datasets = sorted(index)
    methods = sorted({m for d in index.values() for m in d}, key=method_sort_key)
    colours = dict(zip(methods, [c for name in palette for c in plt.get_cmap(name).colors]))
    fig, axes = plt.subplots(2, len(datasets), figsize=(5.5 * len(datasets), 8), squeeze=False)
    return datasets, methods, colours, fig, axes


def length_axes(axes_ticks, legend: dict, log_minor: bool = False) -> None:
    """Log-2 length axes labelled at the given ticks, a grid and a legend. log_minor: minor ticks off on x
    only, plain numbers on a log y axis and the grid on minor ticks too (the variants figure's axes)."""
    from matplotlib.ticker import NullLocator
    from tools.analysis.plot_common import plain_numbers
    for ax, ticks, text in axes_ticks:
        ax.set_xscale("log", base=2)
        ax.set_xticks(ticks, [text(t) for t in ticks])
        if log_minor:
            ax.xaxis.set_minor_locator(NullLocator())
            if ax.get_yscale() == "log":
                plain_numbers(ax.yaxis)
            ax.grid(True, which="both", alpha=0.3)
        else:
            ax.minorticks_off()
            ax.grid(True, alpha=0.3)
        ax.legend(**legend)


@dataclasses.dataclass
class PerplexityStyle:
    """What the perplexity figure of one study shows beyond the measure itself."""
    suptitle: str
    top_title: str = "{dataset} (shaded: min-max over seeds)"
    bottom_title: str = "{dataset}: ppl(L) / ppl(T)"
    bottom_ylabel: str = "ppl(L) / ppl(T)"
    dashed: str = "bf16"                   # a method whose label contains this is drawn dashed
    palette: tuple = ("tab10",)
    theirs: dict | None = None             # a published curve {L / T: ppl} (theirs.py), drawn on the ratios
    theirs_label: str = ""
    threshold: tuple | None = None         # (ratio, label): a rule's threshold on the ratios
    log_scale: bool = False                # log y on top (and below when a ratio passes 10), plain numbers


def perplexity_figure(documents, style: PerplexityStyle):
    """Perplexity against length (top, mean with the min-max over seeds shaded) and ppl(L) / ppl(T) (bottom)."""
    index, by_factor = index_results(documents, "nonoverlap"), ppl_ratios(documents)
    datasets, methods, colours, fig, axes = grid(index, style.palette)
    theirs = style.theirs
    for column, dataset in enumerate(datasets):
        top, bottom = axes[0][column], axes[1][column]
        for method in methods:
            runs = index[dataset].get(method)
            if not runs:
                continue
            lengths = sorted(runs)
            ppl = np.array([[r["ppl"] for r in runs[L].values()] for L in lengths])
            line = dict(color=colours[method], marker="o", linestyle="--" if style.dashed in str(method) else "-")
            top.plot(lengths, ppl.mean(axis=1), label=f"{method} ({ppl.shape[1]} seeds)", **line)
            top.fill_between(lengths, ppl.min(axis=1), ppl.max(axis=1), color=colours[method], alpha=0.12)
            factors = sorted(by_factor[dataset][str(method)])
            bottom.plot(factors, [by_factor[dataset][str(method)][f] for f in factors], label=str(method), **line)
        if theirs:
            bottom.plot(list(theirs), [p / theirs[1] for p in theirs.values()],
                        color="black", linestyle=":", marker="s", label=style.theirs_label)
        top.set_title(style.top_title.format(dataset=dataset))
        top.set_xlabel("evaluation length L (tokens)")
        top.set_ylabel("perplexity (nonoverlap)")
        if style.log_scale:
            top.set_yscale("log")
        bottom.set_title(style.bottom_title.format(dataset=dataset))
        bottom.set_xlabel("L / training length T")
        bottom.set_ylabel(style.bottom_ylabel)
        bottom.axhline(1.0, color="grey", linewidth=0.8)
        if style.threshold:
            bottom.axhline(style.threshold[0], color="grey", linewidth=0.8, linestyle="--", label=style.threshold[1])
        lengths = sorted({L for m in index[dataset].values() for L in m})
        factors = sorted((set(theirs) if theirs else set())
                         | {f for m in by_factor[dataset].values() for f in m})
        if style.log_scale and max(v for m in by_factor[dataset].values() for v in m.values()) > 10:
            bottom.set_yscale("log")  # a method that blows up
        length_axes(((top, lengths, str), (bottom, factors, lambda f: f"{f}x")), {"fontsize": 7}, style.log_scale)
    fig.suptitle(style.suptitle, fontsize=10)
    fig.tight_layout()
    return fig


def accuracy_figure(index, mode, suptitle, threshold):
    """Accuracy against length (top; bold: pooled over seeds, thin: each seed) and acc(L) / acc(T) (bottom)."""
    from tools.analysis.probe_table import correct
    datasets, methods, colours, fig, axes = grid(index, ("tab10",))
    for column, dataset in enumerate(datasets):
        top, bottom = axes[0][column], axes[1][column]
        lengths = sorted({L for m in index[dataset].values() for L in m})
        T = lengths[0]
        for method in methods:
            runs = index[dataset].get(method)
            if not runs:
                continue
            xs = sorted(runs)
            accuracy = np.array([[correct(r).mean() for r in runs[L].values()] for L in xs])
            style = dict(color=colours[method], marker="o", linestyle="--" if "bf16" in str(method) else "-")
            top.plot(xs, accuracy.mean(axis=1), label=f"{method} ({accuracy.shape[1]} seeds)", linewidth=2, **style)
            # Each seed thin: a seed that never learned the task sits at 0 instead of widening a band over everything.
            top.plot(xs, accuracy, color=colours[method], linewidth=0.8, alpha=0.35,
                     linestyle="--" if "bf16" in str(method) else "-")
            at_T = accuracy[0].mean()
            if at_T > 0:
                bottom.plot([L // xs[0] for L in xs], accuracy.mean(axis=1) / at_T, label=str(method), **style)
        top.set_title(f"{dataset}: {mode} accuracy (bold: pooled over seeds; thin: each seed)")
        top.set_xlabel("evaluation length L (tokens)")
        top.set_ylabel("accuracy (greedy exact match)")
        top.set_ylim(-0.02, 1.02)
        bottom.set_title(f"{dataset}: acc(L) / acc(T), pooled over seeds")
        bottom.set_xlabel("L / training length T")
        bottom.set_ylabel("acc(L) / acc(T)")
        bottom.axhline(1.0, color="grey", linewidth=0.8)
        bottom.axhline(threshold[0], color="grey", linewidth=0.8, linestyle="--", label=threshold[1])
        bottom.axvline(8, color="grey", linewidth=0.8, linestyle=":", label="long lengths from here")
        length_axes(((top, lengths, str), (bottom, [L // T for L in lengths], lambda f: f"{f}x")),
                    {"fontsize": 7, "loc": "lower left"})
    fig.suptitle(suptitle, fontsize=10)
    fig.tight_layout()
    return fig
