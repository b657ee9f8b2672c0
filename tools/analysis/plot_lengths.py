"""Perplexity versus evaluation length, one line per method (mean over seeds, band = ± std).

    python -m tools.analysis.plot_lengths eval_results/ --out docs/images/ppl_vs_length [--mode nonoverlap]
"""
import argparse

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from megatron.neox_arguments import run_cli
from megatron.evaluation.modes import mode_names
from megatron.evaluation.results import ResultFileError, load_results
from .plot_common import method_color, method_linestyle, plain_numbers, plt, save_figure
from .results_index import index_results, method_sort_key, train_lengths


def plot_perplexity_vs_length(documents, mode="nonoverlap"):
    """One panel per dataset; x = evaluation length (log scale), y = perplexity (log scale)."""
    index = index_results(documents, mode)
    if not index:
        raise ResultFileError(f"no {mode} records in the result files; pick another --mode")
    trained = train_lengths(documents)
    fig, axes = plt.subplots(1, len(index), figsize=(5.5 * len(index), 4), squeeze=False)
    for ax, dataset in zip(axes[0], sorted(index)):
        for method in sorted(index[dataset], key=method_sort_key):
            points = []
            for length, runs in sorted(index[dataset][method].items()):
                ppl = [r["ppl"] for r in runs.values() if "skipped" not in r]
                if ppl:
                    # spread as a factor (std of log ppl = of the loss): a band that cannot cross zero
                    # on the log axis, however far one seed blew up
                    spread = np.exp(np.std(np.log(ppl), ddof=1)) if len(ppl) > 1 else 1.0
                    points.append((length, np.mean(ppl), spread))
            if not points:
                continue
            x, mean, spread = map(np.array, zip(*points))
            seeds = max(len(runs) for runs in index[dataset][method].values())
            ax.plot(x, mean, marker="o", color=method_color(method), linestyle=method_linestyle(method),
                    label=f"{method} ({seeds} seed{'s' if seeds > 1 else ''})")
            ax.fill_between(x, mean / spread, mean * spread, color=method_color(method), alpha=0.15)
        if trained.get(dataset):
            ax.axvline(trained[dataset], color="grey", linestyle=":", linewidth=1, label="train length")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sorted({L for runs in index[dataset].values() for L in runs}))
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        plain_numbers(ax.yaxis)
        ax.set_xlabel("evaluation length L (tokens)")
        ax.set_ylabel(f"perplexity ({mode})")
        ax.set_title(dataset)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description="Perplexity versus evaluation length (PNG + PDF).")
    parser.add_argument("results", help="folder of result files written by evaluate.py")
    parser.add_argument("--out", required=True, help="output path without extension")
    parser.add_argument("--mode", default="nonoverlap", choices=mode_names(),
                        help="evaluation mode to read (megatron/evaluation/modes/)")
    args = parser.parse_args(argv)
    for path in save_figure(plot_perplexity_vs_length(load_results(args.results), args.mode), args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    run_cli(main)
