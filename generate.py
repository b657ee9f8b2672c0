#!/usr/bin/env python
"""Generate text with a trained run: `python generate.py RUN.yml configs/text_generation.yml` (one
process) or `python deepy.py generate.py RUN.yml configs/text_generation.yml`.

Loads the checkpoint named by `load` and continues prompts (`text-gen-type`: unconditional,
input-file, interactive) with a KV cache, past `seq-length` for relative methods
(megatron/text_generation).
"""
from megatron.neox_arguments import NeoXArgs, run_cli
from megatron.text_generation.run import generate_run


def main():
    generate_run(NeoXArgs.consume_args())


if __name__ == "__main__":
    run_cli(main)
