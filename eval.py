#!/usr/bin/env python
"""Run lm-evaluation-harness tasks on a trained run, like upstream GPT-NeoX:

    python deepy.py eval.py RUN.yml --eval_tasks lambada_openai hellaswag
    python eval.py RUN.yml --eval_tasks TASK... [--set eval-task-length=2048]

Loads the checkpoint named by `load`, evaluates through megatron/evaluation/lm_eval_adapter.py at
`eval-task-length` tokens, prints lm-eval's table and writes `<eval-results-dir>/lm_eval/<run>.json`.
"""
import sys

from megatron.neox_arguments import NeoXArgs, run_cli


def split_eval_tasks(argv: list[str]) -> list[str]:
    """`--eval_tasks A B ...` (upstream's flag) -> `--set eval_tasks=[A, B]` for NeoXArgs."""
    if "--eval_tasks" not in argv:
        return argv
    at = argv.index("--eval_tasks")
    end = next((i for i in range(at + 1, len(argv)) if argv[i].startswith("-")), len(argv))
    tasks = argv[at + 1:end]
    return argv[:at] + argv[end:] + ["--set", "eval_tasks=[" + ", ".join(tasks) + "]"]


def main():
    neox_args = NeoXArgs.consume_args(split_eval_tasks(sys.argv[1:]))  # config errors before lm-eval loads
    from megatron.evaluation.lm_eval_run import evaluate_tasks
    evaluate_tasks(neox_args)


if __name__ == "__main__":
    run_cli(main)
