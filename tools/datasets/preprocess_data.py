"""Tokenize .jsonl / .jsonl.zst / .txt corpora into NeoX `.bin/.idx` datasets (GPT-NeoX's flags).

    python tools/datasets/preprocess_data.py --input data/corpora/prose.jsonl.zst \
        --output-prefix data/prose/prose --tokenizer-type GPT2BPETokenizer \
        --vocab-file data/gpt2-vocab.json --merge-file data/gpt2-merges.txt \
        --append-eod --workers 2

(`python tools/datasets/prepare_data.py prose gpt2` builds the corpus and fetches GPT-2's files there.)

writes data/prose/prose_text_document.bin/.idx (use `data-path: data/prose/prose_text_document`).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from megatron.data.preprocess import preprocess  # noqa: E402
from megatron.neox_arguments import run_cli  # noqa: E402
from megatron.tokenizer import TOKENIZER_TYPES, make_tokenizer  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    group = parser.add_argument_group("input data")
    group.add_argument("--input", required=True, nargs="+",
                       help="files, directories or globs (comma-separated lists too): .jsonl, .jsonl.zst, "
                            ".txt and the other archives lm_dataformat reads")
    group.add_argument("--jsonl-keys", nargs="+", default=["text"],
                       help="JSON keys to extract; one dataset per key (default: text)")
    group.add_argument("--skip-bad-input", action="store_true",
                       help="skip and count bad lines/files (invalid JSON or UTF-8, missing key, corrupt "
                            ".zst, empty file) instead of stopping at the first one")
    group = parser.add_argument_group("tokenizer")
    group.add_argument("--tokenizer-type", required=True, choices=TOKENIZER_TYPES)
    group.add_argument("--vocab-file", help="GPT-2 vocab.json, a tokenizer.json or a SentencePiece .model")
    group.add_argument("--merge-file", help="GPT-2 merges.txt")
    group.add_argument("--append-eod", action="store_true", help="append the end-of-document id to every document")
    group = parser.add_argument_group("output data")
    group.add_argument("--output-prefix", required=True,
                       help="writes <prefix>_<key>_document.bin/.idx")
    group.add_argument("--dataset-impl", default="mmap", choices=["mmap"], help="only NeoX's mmap format")
    group = parser.add_argument_group("runtime")
    group.add_argument("--workers", type=int, default=1, help="tokenizer processes (output identical for any count)")
    group.add_argument("--no-progress", action="store_true", help="no progress bar (logs, CI)")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    tokenizer = make_tokenizer(args.tokenizer_type, args.vocab_file, args.merge_file)
    summary = preprocess(args.input, args.output_prefix, tokenizer, jsonl_keys=args.jsonl_keys,
                         append_eod=args.append_eod, workers=args.workers,
                         skip_bad_input=args.skip_bad_input, show_progress=not args.no_progress)
    print(summary)


if __name__ == "__main__":
    run_cli(main)
