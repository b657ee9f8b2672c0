"""Train a byte-level BPE tokenizer of a given vocabulary size on a corpus (HF `tokenizers`).

    python tools/train_tokenizer.py --input data/stdlib/stdlib.jsonl.zst --vocab-size 8192 \
        --output data/stdlib/tokenizer.json

Use the result with `tokenizer-type: HFTokenizer` and `vocab-file: data/stdlib/tokenizer.json`.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

from megatron.data.documents import expand_inputs, read_documents  # noqa: E402
from megatron.neox_arguments import run_cli  # noqa: E402
from megatron.tokenizer.train_bpe import train_bpe_tokenizer  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--input", required=True, nargs="+", help="files, directories or globs (.jsonl, .jsonl.zst, .txt)")
    parser.add_argument("--jsonl-key", default="text", help="JSON key holding the text (default: text)")
    parser.add_argument("--vocab-size", required=True, type=int, help="ids in the trained vocabulary")
    parser.add_argument("--output", required=True, help="where to write tokenizer.json")
    args = parser.parse_args(argv)
    texts = (texts[0] for _, _, texts in read_documents(expand_inputs(args.input), (args.jsonl_key,)))
    tokenizer = train_bpe_tokenizer(texts, args.vocab_size, args.output)
    print(f"wrote {args.output}: {tokenizer.vocab_size} ids (EOD {tokenizer.eod}, pad {tokenizer.pad}); "
          f"use tokenizer-type HFTokenizer with vocab-file {args.output}")


if __name__ == "__main__":
    run_cli(main)
