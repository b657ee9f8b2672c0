#!/usr/bin/env python
"""Train a model: `python deepy.py train.py configs/tiny.yml` (every rank), or `python train.py
configs/tiny.yml [--set key=value]` in one process."""
import sys

from megatron.neox_arguments import NeoXArgs, run_cli


def main():
    from megatron.training import TrainingError, pretrain
    neox_args = NeoXArgs.consume_args()
    try:
        pretrain(neox_args)
    except TrainingError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
