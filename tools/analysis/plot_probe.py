"""Retrieval-probe heatmaps: accuracy over (evaluation length x needle depth), one panel per result
file, for the `passkey` or the `kv-retrieval` mode.

    python -m tools.analysis.plot_probe eval_results/tiny_probe/*.json --out docs/images/passkey
    python -m tools.analysis.plot_probe eval_results/tiny_kv/*.json --mode kv-retrieval --out figures/kv
    python -m tools.analysis.plot_probe eval_results/a eval_results/b --name 'KERPLE*' --out figures/passkey
    python -m tools.analysis.plot_probe eval_results/tiny_probe --show rank --out figures/passkey_rank

The drawing is megatron/evaluation/retrieval/heatmap.py's, which evaluate.py uses for the heatmap it
writes beside each result file.
"""
import argparse

from megatron.probes import TASKS
from megatron.evaluation.retrieval.heatmap import QUANTITIES, draw_panel, plot_heatmaps  # noqa: F401 (tools.reproduce draws panels)
from megatron.neox_arguments import run_cli
from .result_selection import add_selection_arguments, selected_documents


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_selection_arguments(parser)  # one panel per result file
    parser.add_argument("--mode", choices=list(TASKS), default="passkey", help="which probe's records to draw")
    parser.add_argument("--show", choices=list(QUANTITIES), default="accuracy",
                        help="what each cell shows: accuracy, the answer's mean rank, or its NLL per token")
    parser.add_argument("--out", required=True, help="figure path without extension (.png and .pdf)")
    args = parser.parse_args(argv)
    for path in plot_heatmaps(selected_documents(args), args.out, args.mode, args.show):
        print(f"wrote {path}")


if __name__ == "__main__":
    run_cli(main)
