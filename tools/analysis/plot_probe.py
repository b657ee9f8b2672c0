"""Retrieval-probe heatmaps: accuracy over (evaluation length x needle depth), one panel per result
file, for the `passkey` or the `kv-retrieval` mode.

    python -m tools.analysis.plot_probe eval_results/tiny_probe/*.json --out docs/images/passkey
    python -m tools.analysis.plot_probe eval_results/tiny_kv/*.json --mode kv-retrieval --out figures/kv

The drawing is megatron/evaluation/probes/heatmap.py's, which evaluate.py uses for the heatmap it
writes beside each result file.
"""
import argparse

from megatron.evaluation.probes import TASKS
from megatron.evaluation.probes.heatmap import draw_panel, plot_heatmaps  # noqa: F401 (tools.reproduce draws panels)
from megatron.evaluation.results import load_result
from megatron.neox_arguments import run_cli


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="result files (one panel each)")
    parser.add_argument("--mode", choices=list(TASKS), default="passkey", help="which probe's records to draw")
    parser.add_argument("--out", required=True, help="figure path without extension (.png and .pdf)")
    args = parser.parse_args(argv)
    for path in plot_heatmaps([load_result(p) for p in args.results], args.out, args.mode):
        print(f"wrote {path}")


if __name__ == "__main__":
    run_cli(main)
