#!/usr/bin/env python
"""Generate text with a trained run: `python generate.py RUN.yml configs/text_generation.yml` (one
process) or `python deepy.py generate.py RUN.yml configs/text_generation.yml`.

Loads the checkpoint named by `load` and continues prompts (`text-gen-type`: unconditional,
input-file, interactive) with a KV cache, past `seq-length` for relative methods
(megatron/text_generation).
"""
from megatron.neox_arguments import NeoXArgs, run_cli


def main():
    neox_args = NeoXArgs.consume_args()  # config errors first, before the generation stack is imported
    from megatron.text_generation.run import generate_run
    generate_run(neox_args)


if __name__ == "__main__":
    run_cli(main)
