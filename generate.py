#!/usr/bin/env python
r"""Generate text with a trained run: loads the checkpoint named by `load` and continues prompts
(`text-gen-type`: unconditional, input-file, interactive) with a KV cache, past `seq-length` for
relative methods (megatron/text_generation). Every sample is printed; `sample-output-file` also gets
one JSON line per sample.

examples:
  python generate.py configs/text_generation.yml --set load=checkpoints/tiny/kerple_log   # model: the checkpoint's
  python generate.py configs/tiny.yml configs/text_generation.yml --set load=checkpoints/tiny/kerple_log
  python generate.py configs/tiny.yml configs/text_generation.yml --set load=checkpoints/tiny/kerple_log \
    --set text-gen-type=input-file --set sample-input-file=prompts.txt --set sample-output-file=out.jsonl
  python deepy.py generate.py configs/tiny.yml configs/text_generation.yml --set load=checkpoints/tiny/kerple_log
"""
from megatron.neox_arguments import NeoXArgs, run_cli


def main():
    neox_args = NeoXArgs.consume_args()  # config errors first, before the generation stack is imported
    from megatron.run.cpu_threads import choose_cpu_threads
    choose_cpu_threads(neox_args.rank)  # no thread cliff on a busy CPU
    from megatron.text_generation.run import generate_run
    from megatron.tokenizer import build_tokenizer
    generate_run(neox_args.generation_run(), neox_args.inference_run(), build_tokenizer(neox_args.tokenizer_run()))


if __name__ == "__main__":
    run_cli(main)
