"""Position-wise perplexity at one evaluation length (the paper's Figure 5), one line per method.

    python -m tools.analysis.plot_position eval_results/ [more folders or globs] --length 512
        --out docs/images/position_ppl [--smooth 8] [--method/--name/--seed ...] [--rename OLD=NEW ...]

Needs `position` in eval-modes. Each line is exp(mean loss at position p), the mean taken over the
chunks and then over seeds. A windowed run (attention-window at the training length) is the paper's
baseline: a method that uses context beyond the window keeps falling below it past the window.
"""
import argparse

import numpy as np

from megatron.neox_arguments import run_cli
from megatron.evaluation.results import ResultFileError
from .plot_common import legend_outside, method_color, plain_numbers, plt, save_figure, variant_styles
from .result_selection import add_selection_arguments, selected_documents
from .results_index import index_results, method_sort_key, train_lengths


def plot_position_perplexity(documents, length, dataset=None, smooth=1):
    index = index_results(documents, "position")
    if dataset is None:
        if len(index) != 1:
            raise ResultFileError(f"the results hold datasets {sorted(index)}; choose one with --dataset")
        dataset = next(iter(index))
    if dataset not in index:
        raise ResultFileError(f"no position records for dataset {dataset!r}; have {sorted(index)}")
    runs_by_method = {m: runs[length] for m, runs in index[dataset].items()
                      if length in runs and any("skipped" not in r for r in runs[length].values())}
    if not runs_by_method:
        raise ResultFileError(f"no position records at length {length} for {dataset}; evaluate with "
                              "`position` in eval-modes and this length in eval-lengths")

    fig, ax = plt.subplots(figsize=(7, 4))
    styles = variant_styles(sorted(runs_by_method, key=method_sort_key))
    for method in sorted(runs_by_method, key=method_sort_key):
        curves = [r["position_loss"] for r in runs_by_method[method].values() if "skipped" not in r]
        loss = np.mean(curves, axis=0)
        if smooth > 1:  # trailing mean: the value at p averages positions p - smooth + 1 .. p
            loss = np.convolve(loss, np.ones(smooth) / smooth, mode="valid")
        x = np.arange(length - len(loss), length)
        ax.plot(x, np.exp(loss), color=method_color(method), linestyle=styles[method][0],
                linewidth=1.2, label=f"{method.display} ({len(curves)} seed{'s' if len(curves) > 1 else ''})")
    trained = train_lengths(documents).get(dataset)
    if trained:
        ax.axvline(trained, color="grey", linestyle=":", linewidth=1, label="train length")
    ax.set_yscale("log")
    ax.set_xlabel("position in the sequence" + (f" (trailing mean over {smooth})" if smooth > 1 else ""))
    ax.set_ylabel("perplexity at position")
    ax.set_title(f"{dataset}: position-wise perplexity at L = {length}")
    ax.grid(True, which="both", alpha=0.3)
    legend_outside(ax)
    plain_numbers(ax.yaxis)
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description="Position-wise perplexity at one length (PNG + PDF).")
    add_selection_arguments(parser, length_filter=False)
    parser.add_argument("--length", type=int, required=True, help="evaluation length to plot")
    parser.add_argument("--dataset", help="dataset to plot when the results hold several")
    parser.add_argument("--smooth", type=int, default=1, help="trailing mean over this many positions")
    parser.add_argument("--out", required=True, help="output path without extension")
    args = parser.parse_args(argv)
    fig = plot_position_perplexity(selected_documents(args), args.length, args.dataset, args.smooth)
    for path in save_figure(fig, args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    run_cli(main)
