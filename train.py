#!/usr/bin/env python
"""Train a decoder from a NeoX config: the model (its positional method is `pos-emb`), trained for
`train-iters` steps on the data of `data-path`, checkpoints written to `save` every `checkpoint-factor`
steps and at the end. With `load` set to a run's `save` folder it resumes from that run's latest
checkpoint (a missing or empty folder starts at step 0). `train-iters: 0` scores the `load` checkpoint
instead, as evaluate.py does (the KERPLE fork's way).

examples:
  python train.py configs/tiny.yml --set run-dir=runs/tiny      # one process: the tiny CPU model, filed in runs/tiny
  python train.py configs/tiny.yml --set pos-emb=alibi --set run-dir=runs/tiny-alibi --set train-iters=500
  python deepy.py train.py configs/kerple_log.yml               # every rank, through DeepSpeed's launcher
  python deepy.py train.py configs/kerple_log.yml --dry-run     # the merged config, DeepSpeed JSON, command
"""
import signal
import sys

from megatron.neox_arguments import NeoXArgs, run_cli


def main():
    neox_args = NeoXArgs.consume_args()  # config errors first, before the training stack is imported
    from megatron.run.cpu_threads import choose_cpu_threads
    choose_cpu_threads(neox_args.rank)  # no thread cliff on a busy CPU
    from megatron.training.loop import TrainingError, pretrain
    if neox_args.train_iters == 0:
        # The KERPLE fork evaluates by training 0 steps at seq-length-val; here that is evaluate.py's
        # scoring of `load` (eval-lengths default: seq-length-val), with its result file.
        from megatron.evaluation.driver import evaluate_run
        if "eval_lengths" not in neox_args.config_sources:
            neox_args.eval_lengths = [neox_args.seq_length_val]
        evaluate_run(neox_args.evaluation_run())
        return 0
    neox_args.join_process_group()  # the records below carry this rank's share and the config a save stores
    try:
        result = pretrain(neox_args.training_run())
    except TrainingError as err:  # every rank stops on the same shared numbers: rank 0 says why
        if neox_args.rank == 0:
            print(f"error: {err}", file=sys.stderr)
        return 1
    if result.stopped_by:
        # Interrupted training is not finished training: `train.py ... && next-step` and schedulers must
        # not take it for one. The shell's (and deepy.py's) convention: 128 + the signal.
        name = signal.Signals(result.stopped_by).name
        if neox_args.rank == 0:
            kept = "saved: the same command resumes" if neox_args.save else "not saved: `save` is not set"
            print(f"train.py: stopped by {name} after step {result.iteration} of {neox_args.train_iters} ({kept}). "
                  f"Exit status {128 + result.stopped_by} = 128 + {name}.", file=sys.stderr)
        return 128 + result.stopped_by
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
