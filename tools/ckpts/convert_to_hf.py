#!/usr/bin/env python
"""Export a checkpoint to a Hugging Face folder:

    python tools/ckpts/convert_to_hf.py --input_dir CKPT/global_stepN --config_file CONFIG.yml --output_dir DIR

`rotary`/`none` models become transformers' GPTNeoXForCausalLM; every other positional method a
folder that loads with `AutoModelForCausalLM.from_pretrained(DIR, trust_remote_code=True)`. Both hold
tokenizer files: `AutoTokenizer.from_pretrained(DIR, trust_remote_code=True)` (tools/ckpts/hf_export).
"""
import argparse
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from megatron.neox_arguments import run_cli  # noqa: E402
from tools.ckpts.hf_export import TARGETS, export_checkpoint  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input_dir", required=True, help="checkpoint folder <save>/global_stepN (or <save>: latest)")
    parser.add_argument("--config_file", nargs="+", help="the run's YAML config(s); default the checkpoint's copy")
    parser.add_argument("--output_dir", required=True, help="new folder for the Hugging Face files")
    parser.add_argument("--target", choices=TARGETS, default="auto",
                        help="gpt_neox: transformers' GPTNeoXForCausalLM (rotary/none only); custom: "
                             "trust_remote_code folder; auto: gpt_neox when it can hold the model")
    args = parser.parse_args(argv)
    target = export_checkpoint(args.input_dir, args.output_dir, args.config_file, args.target)
    print(f"wrote {args.output_dir} ({target})")


if __name__ == "__main__":
    run_cli(main)
