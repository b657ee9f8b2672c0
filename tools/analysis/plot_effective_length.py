"""Effective length by method: one group of bars per measure (perplexity, probes, RULER tasks), one bar
per method named under it (a windowed run hatched), its bootstrap 95% interval as the error bar, the
training length marked (tools/analysis/effective_length.py defines it). A bar that reaches the longest
length measured without failing is censored: "≥" over it says the effective length is at least that.

    python -m tools.analysis.plot_effective_length eval_results/tiny --out eval_results/tiny/effective_length
"""
import argparse

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from megatron.neox_arguments import run_cli
from .effective_length import add_criteria_arguments, censored, estimates_of_args
from .plot_common import method_color, plt, save_figure
from .results_index import method_sort_key


def plot_effective_length(by_measure: dict, threshold: float, ppl_factor: float):
    measures = sorted(by_measure, key=lambda m: (not m.startswith("ppl"), m))
    methods = sorted({m for per in by_measure.values() for m in per}, key=method_sort_key)
    trained = {e["train_length"] for per in by_measure.values() for e in per.values()}
    width = 0.8 / len(methods)
    # every bar named under it: the variants of one method share its colour (a sweep's RoPE scalings)
    fig, ax = plt.subplots(figsize=(1.6 + len(measures) * max(1.4, 0.3 * len(methods)), 4.6))
    floor = min(trained) / 2  # bars start here: "none" (score 0 at the reference) is drawn as no bar
    ticks, names = [], []
    any_censored = False
    for j, method in enumerate(methods):
        for i, measure in enumerate(measures):
            e = by_measure[measure].get(method)
            x = i - 0.4 + width * (j + 0.5)
            if e is None:
                continue
            ticks.append(x)
            names.append(str(method))
            if e["effective"] is None:
                ax.text(x, floor * 1.1, "none" if e["reference"] else "n/a", rotation=90, ha="center", va="bottom",
                        fontsize=7, color=method_color(method))
                continue
            err = None
            if e["low"] is not None:
                err = [[e["effective"] - e["low"]], [e["high"] - e["effective"]]]
            ax.bar(x, e["effective"] - floor, width * 0.9, bottom=floor, color=method_color(method),
                   hatch="//" if method.window else None, edgecolor="white", yerr=err, capsize=3)
            if censored(e, e["effective"]):
                any_censored = True
                ax.text(x, e["effective"] * 1.06, "≥", ha="center", va="bottom", fontsize=10,
                        color=method_color(method))
    for length in trained:
        ax.axhline(length, color="grey", linestyle=":", linewidth=1, label=f"train length {length}")
    if any_censored:  # a legend entry for the mark, drawn as text above
        ax.plot([], [], " ", label="≥: nothing failed up to the longest length measured")
    ax.legend(fontsize=8)
    ax.set_yscale("log", base=2)
    longest = max((e["effective"] for per in by_measure.values() for e in per.values() if e["effective"]),
                  default=min(trained))
    ax.set_ylim(floor, longest * 1.8)  # room for the "≥" over the tallest bar
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_xticks(ticks, names, rotation=90, fontsize=7)
    groups = ax.secondary_xaxis("top")  # the measures, one label over each group of bars
    groups.set_xticks(np.arange(len(measures)), measures)
    ax.set_xlim(-0.5, len(measures) - 0.5)
    ax.set_ylabel("effective length (tokens)")
    ax.set_title(f"Effective length by method (perplexity within {ppl_factor:g}x, scores >= {threshold:g}x the "
                 "reference)", fontsize=9)
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description="Effective length by method (PNG + PDF).")
    parser.add_argument("results", help="eval-results-dir: evaluate.py's files and eval.py's lm_eval/ folder")
    parser.add_argument("--out", required=True, help="output path without extension")
    add_criteria_arguments(parser)
    args = parser.parse_args(argv)
    by_measure = estimates_of_args(args)
    for path in save_figure(plot_effective_length(by_measure, args.threshold, args.ppl_factor), args.out):
        print(path)


if __name__ == "__main__":
    run_cli(main)
