#!/usr/bin/env python
r"""Run lm-evaluation-harness tasks on a trained run, like upstream GPT-NeoX: loads the checkpoint
named by `load`, scores the tasks of `--eval_tasks` through megatron/evaluation/lm_eval_adapter.py at
`eval-task-length` tokens (any length the positional method supports), prints lm-eval's table and
writes `<eval-results-dir>/lm_eval/<run>.json`. Tasks of your own (no internet needed) are lm-eval
task YAML files in a folder named by `eval-task-paths`.

examples:
  python eval.py --set load=checkpoints/tiny/kerple_log --eval_tasks lambada_openai   # model: the checkpoint's
  python eval.py configs/tiny.yml --set load=checkpoints/tiny/kerple_log --eval_tasks lambada_openai
  python eval.py configs/tiny.yml --set load=checkpoints/tiny/kerple_log --eval_tasks my_task \
    --set 'eval-task-paths=[my_tasks]' --set eval-task-length=256
  python deepy.py eval.py configs/kerple_log.yml --eval_tasks lambada_openai hellaswag
  # RULER (megatron/evaluation/ruler.py, docs/ruler.md): at eval-lengths (here 64 ... 2048) with the run's tokenizer
  python eval.py configs/tiny.yml configs/eval/tiny.yml --set load=checkpoints/tiny/kerple_log \
    --eval_tasks niah_single_1 --set eval-task-limit=20 [--set 'eval-task-metadata={max_seq_lengths: [512, 1024]}']
"""
from megatron.neox_arguments import NeoXArgs, run_cli


def main():
    neox_args = NeoXArgs.consume_args()  # config errors before lm-eval loads
    from megatron.run.cpu_threads import choose_cpu_threads
    choose_cpu_threads(neox_args.rank)  # no thread cliff on a busy CPU
    from megatron.evaluation.lm_eval_run import evaluate_tasks
    evaluate_tasks(neox_args.evaluation_run(), neox_args.lm_eval_tasks())


if __name__ == "__main__":
    run_cli(main)
