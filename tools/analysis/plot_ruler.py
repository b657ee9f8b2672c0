"""RULER score against length, one panel per task (rows of 3), one line per method (a line style and marker
per variant of one method: plot_common.variant_styles; seeds averaged; methods drawn slightly apart along x
so equal scores stay visible), the training length marked; lengths where no sample fits are left out. One
legend for the figure, under the panels, which names the one kind of band: the bootstrap 95% interval over
samples.

    python -m tools.analysis.plot_ruler eval_results/tiny --out eval_results/tiny/ruler_vs_length
"""
import argparse

import numpy as np
from matplotlib.patches import Patch
from matplotlib.ticker import FuncFormatter, NullFormatter

from megatron.evaluation.results import ResultFileError
from megatron.neox_arguments import run_cli
from .plot_common import method_color, plt, save_figure, variant_styles
from .results_index import method_sort_key
from .ruler_table import index_ruler, load_ruler, seed_mean, train_length


def plot_ruler(documents):
    index, trained = index_ruler(documents), train_length(documents)
    tasks = sorted(index)
    columns = min(3, len(tasks))  # rows of 3 panels: readable at a page's width
    rows = -(-len(tasks) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(3.3 * columns, 2.6 * rows), squeeze=False, sharey=True)
    for ax in axes.flat[len(tasks):]:
        ax.set_visible(False)
    for ax, task in zip(axes.flat, tasks):
        every = sorted({n for runs in index[task].values() for n in runs} | ({trained} if trained else set()))
        methods = sorted(index[task], key=method_sort_key)
        styles = variant_styles(methods)  # the variants of one method (same colour) told apart
        for j, method in enumerate(methods):
            points = [(n, *seed_mean(runs)) for n, runs in sorted(index[task][method].items()) if seed_mean(runs)]
            if not points:
                continue
            x, score, low, high = map(np.array, zip(*points))
            x = x * 1.04 ** (j - (len(methods) - 1) / 2)  # methods side by side: equal scores stay visible
            seeds = max(len(runs) for runs in index[task][method].values())
            ax.plot(x, score, marker=styles[method][1], color=method_color(method), linestyle=styles[method][0],
                    label=f"{method} ({seeds} seed{'s' if seeds > 1 else ''})")
            ax.fill_between(x, low, high, color=method_color(method), alpha=0.15)
        unfit = [n for n in sorted({n for per in index[task].values() for n in per})
                 if not any(seed_mean(per[n]) for per in index[task].values() if n in per)]
        if not any(seed_mean(runs) for per in index[task].values() for runs in per.values()):
            ax.text(0.5, 0.5, "no sample fits\nat any length", transform=ax.transAxes, ha="center", color="grey",
                    fontsize=8)
        elif unfit:  # said on the figure, not only left out: a missing point is not a score of 0
            ax.text(0.5, 0.55, f"no sample fits at {', '.join(map(str, unfit))}", transform=ax.transAxes,
                    ha="center", color="grey", fontsize=7)
        if trained:
            ax.axvline(trained, color="grey", linestyle=":", linewidth=1, label=f"training length {trained}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(every)
        ax.set_xlim(min(every) / 1.3, max(every) * 1.3)
        ax.xaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.tick_params(labelsize=7)
        ax.set_ylim(-0.03, 1.03)
        ax.set_title(task, fontsize=9)
        ax.grid(True, alpha=0.3)
    fig.supxlabel("RULER length (tokens, prompt + answer reserve)", fontsize=9)
    fig.supylabel("score (share of answers found)", fontsize=9)
    fig.tight_layout()
    handles = {}  # one entry per label over every panel, in the order first drawn
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    handles["bands: bootstrap 95% interval over samples (mean over seeds)"] = Patch(color="grey", alpha=0.15)
    fig.legend(handles.values(), handles.keys(), loc="upper center", bbox_to_anchor=(0.5, 0.0),
               ncol=min(3, len(handles)), fontsize=8, frameon=False)
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description="RULER score against length (PNG + PDF).")
    parser.add_argument("results", help="eval-results-dir (eval.py wrote its RULER results into its lm_eval/)")
    parser.add_argument("--out", required=True, help="output path without extension")
    args = parser.parse_args(argv)
    documents = load_ruler(args.results)
    if not documents:
        raise ResultFileError(f"no RULER results in {args.results}/lm_eval; run eval.py with a RULER task first.")
    for path in save_figure(plot_ruler(documents), args.out):
        print(path)


if __name__ == "__main__":
    run_cli(main)
