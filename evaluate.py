#!/usr/bin/env python
"""Evaluate a trained run at many lengths: loads the checkpoint named by `load` (a missing, empty or
mismatched one is an error, never a random model), scores the `eval-split` stream at each of
`eval-lengths` in each of `eval-modes` (perplexity modes and the retrieval probes `passkey` and
`kv-retrieval`) and writes one JSON result file into `eval-results-dir` (megatron/evaluation);
`python -m tools.analysis.make_tables` turns result files into tables.

The model is the checkpoint's own (its stored config): a model config given as well must agree with it.

examples:
  python evaluate.py configs/tiny.yml configs/eval/tiny.yml --set load=checkpoints/tiny/kerple_log   # one process
  python evaluate.py configs/eval/tiny.yml --set load=checkpoints/tiny/kerple_log   # model, data: the checkpoint's
  python evaluate.py configs/tiny.yml configs/eval/probe.yml --set load=checkpoints/tiny/kerple_log
  python deepy.py evaluate.py configs/kerple_log.yml configs/eval/extrapolation.yml   # every rank a share
"""
from megatron.probes import TASKS as PROBE_TASKS
from megatron.neox_arguments import NeoXArgs, run_cli


def main():
    args = NeoXArgs.consume_args()  # config errors first, before the evaluation stack is imported
    from megatron.run.cpu_threads import choose_cpu_threads
    choose_cpu_threads(args.rank)  # no thread cliff on a busy CPU
    from megatron.evaluation.driver import evaluate_run
    path = evaluate_run(args.evaluation_run())  # the records evaluation reads, built from the config here
    probes = [mode for mode in args.eval_modes if mode in PROBE_TASKS]
    if probes and args.rank == 0:  # each probe's accuracy grid as a figure beside the file
        from megatron.evaluation.retrieval.heatmap import heatmap_of_file
        for mode in probes:
            print("wrote " + ", ".join(str(p) for p in heatmap_of_file(path, mode)), flush=True)


if __name__ == "__main__":
    run_cli(main)
