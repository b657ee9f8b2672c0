"""Perplexity versus evaluation length, one line per run label (mean over seeds).

    python -m tools.analysis.plot_lengths eval_results/a eval_results/b --out docs/images/ppl_vs_length
        [--mode nonoverlap] [--method/--name/--seed/--length ...] [--rename OLD=NEW ...]

One colour per base method, a line style and marker per variant of it (plot_common.variant_styles), the
legend right of the panels, the training length a dotted line. One kind of band per figure, named under
it: ± one standard deviation over seeds when runs have several seeds (a run with one seed then has no
band: one seed has no spread), or, when every run has a single seed, the 95% bootstrap interval over its
evaluation chunks (the chunk losses every record carries).
"""
import argparse

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from megatron.neox_arguments import run_cli
from megatron.evaluation.modes import mode_names
from megatron.evaluation.results import ResultFileError
from .plot_common import legend_outside, method_color, plain_numbers, plt, save_figure, variant_styles
from .result_selection import add_selection_arguments, selected_documents
from .results_index import index_results, method_sort_key, train_lengths

BOOTSTRAP_SAMPLES = 2000
BOOTSTRAP_SEED = 0  # fixed: the same files always draw the same figure


def chunk_bootstrap(record: dict, level: float = 0.95) -> tuple[float, float]:
    """(low, high) perplexity: the `level` percentile interval of exp(mean chunk loss) over resampled chunks."""
    losses = np.asarray(record["chunk_losses"], dtype=np.float64)
    if len(losses) < 2:
        return record["ppl"], record["ppl"]
    rng = np.random.default_rng(BOOTSTRAP_SEED)
    means = losses[rng.integers(0, len(losses), (BOOTSTRAP_SAMPLES, len(losses)))].mean(axis=1)
    low, high = np.quantile(means, [(1 - level) / 2, (1 + level) / 2])
    return float(np.exp(low)), float(np.exp(high))


BANDS = {"seeds": "± 1 std over seeds (of the loss); runs with one seed have no band",
         "chunks": "95% bootstrap interval over evaluation chunks (every run has one seed)"}


def _point(records: list[dict], band: str):
    """(mean perplexity, band low, band high) over the seeds' records at one length; no band: NaN."""
    ppl = np.array([r["ppl"] for r in records])
    if band == "chunks":
        return (ppl[0], *chunk_bootstrap(records[0]))
    if len(ppl) > 1:
        # spread as a factor (std of log ppl = of the loss): a band that cannot cross zero on the log
        # axis, however far one seed blew up
        spread = np.exp(np.std(np.log(ppl), ddof=1))
        return ppl.mean(), ppl.mean() / spread, ppl.mean() * spread
    return ppl[0], np.nan, np.nan


def band_kind(index) -> str:
    """The figure's one kind of band: "chunks" when every run has one seed, else "seeds"."""
    seeds = {len(runs) for per_method in index.values() for per_length in per_method.values()
             for runs in per_length.values()}
    return "chunks" if seeds == {1} else "seeds"


def plot_perplexity_vs_length(documents, mode="nonoverlap"):
    """One panel per dataset; x = evaluation length (log scale), y = perplexity (log scale)."""
    index = index_results(documents, mode)
    if not index:
        raise ResultFileError(f"no {mode} records in the result files; pick another --mode")
    trained = train_lengths(documents)
    fig, axes = plt.subplots(1, len(index), figsize=(6.5 * len(index), 4.2), squeeze=False)
    band = band_kind(index)
    for ax, dataset in zip(axes[0], sorted(index)):
        methods = sorted(index[dataset], key=method_sort_key)
        styles = variant_styles(methods)
        for method in methods:
            points = []
            for length, runs in sorted(index[dataset][method].items()):
                scored = [r for r in runs.values() if "skipped" not in r]
                if scored:
                    points.append((length, *_point(scored, band)))
            if not points:
                continue
            x, mean, low, high = map(np.array, zip(*points))
            seeds = max(len(runs) for runs in index[dataset][method].values())
            linestyle, marker = styles[method]
            ax.plot(x, mean, marker=marker, markersize=4, color=method_color(method), linestyle=linestyle,
                    label=f"{method.display} ({seeds} seed{'s' if seeds > 1 else ''})")
            ax.fill_between(x, low, high, color=method_color(method), alpha=0.12, linewidth=0)
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
        ax.set_title(dataset + (f" (trained at {trained[dataset]})" if trained.get(dataset) else ""))
        ax.grid(True, which="both", alpha=0.3)
        legend_outside(ax)
    fig.text(0.01, -0.02, "bands: " + BANDS[band], fontsize=8, ha="left", va="top")
    fig.tight_layout()
    return fig


def main(argv=None):
    parser = argparse.ArgumentParser(description="Perplexity versus evaluation length (PNG + PDF).")
    add_selection_arguments(parser)
    parser.add_argument("--out", required=True, help="output path without extension")
    parser.add_argument("--mode", default="nonoverlap", choices=mode_names(),
                        help="evaluation mode to read (megatron/evaluation/modes/)")
    args = parser.parse_args(argv)
    for path in save_figure(plot_perplexity_vs_length(selected_documents(args), args.mode), args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    run_cli(main)
