"""Build the built-in default corpus end to end: CPython stdlib -> jsonl.zst -> (tokenizer) -> .bin/.idx.

    python tools/datasets/build_default_corpus.py                 # byte-level, data/stdlib/...
    python tools/datasets/build_default_corpus.py --max-bytes 2000000          # a small, fast one
    python tools/datasets/build_default_corpus.py --train-tokenizer 8192       # own BPE tokenizer

writes data/stdlib/stdlib.jsonl.zst and data/stdlib/stdlib_text_document.bin/.idx, the
`data-path` of configs/tiny.yml. No download: the source is the running interpreter's library.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from megatron.data.documents import read_documents  # noqa: E402
from megatron.data.preprocess import preprocess  # noqa: E402
from megatron.data.stdlib_corpus import stdlib_root, write_stdlib_corpus  # noqa: E402
from megatron.neox_arguments import run_cli  # noqa: E402
from megatron.progress import switched_on  # noqa: E402
from megatron.tokenizer import TOKENIZER_TYPES, make_tokenizer  # noqa: E402
from megatron.tokenizer.train_bpe import train_bpe_tokenizer  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--output-dir", default="data/stdlib", help="where everything goes (default: data/stdlib)")
    parser.add_argument("--name", default="stdlib", help="file name stem (default: stdlib)")
    parser.add_argument("--include-tests", action="store_true", help="also the library's test suites (~3x larger)")
    parser.add_argument("--max-bytes", type=int, help="stop adding files at this many bytes of source (fast CI runs)")
    parser.add_argument("--tokenizer-type", default="ByteLevelTokenizer", choices=TOKENIZER_TYPES,
                        help="tokenizer for the .bin/.idx (default: ByteLevelTokenizer, needs no files)")
    parser.add_argument("--vocab-file", help="tokenizer file, for the types that need one")
    parser.add_argument("--merge-file", help="GPT-2 merges.txt")
    parser.add_argument("--train-tokenizer", type=int, metavar="VOCAB_SIZE",
                        help="train a byte-level BPE of this size on the corpus and use it (HFTokenizer)")
    parser.add_argument("--workers", type=int, default=1, help="tokenizer processes")
    parser.add_argument("--no-progress", action="store_true", help="no progress bars")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    corpus = os.path.join(args.output_dir, f"{args.name}.jsonl.zst")
    print(f"[1/3] gathering the .py files of {stdlib_root()}")
    stats = write_stdlib_corpus(corpus, include_tests=args.include_tests, max_bytes=args.max_bytes)
    print(f"      {corpus}: {stats.files} files, {stats.bytes / 1e6:.1f} MB"
          + (f" ({stats.undecodable} undecodable files left out)" if stats.undecodable else ""))

    if args.train_tokenizer:
        vocab_file = os.path.join(args.output_dir, "tokenizer.json")
        print(f"[2/3] training a {args.train_tokenizer}-id byte-level BPE tokenizer")
        texts = (texts[0] for _, _, texts in read_documents([corpus]))
        # The `tokenizers` library draws its own bar, on a terminal only; NEOX_PROGRESS=0 turns it off too.
        tokenizer = train_bpe_tokenizer(texts, args.train_tokenizer, vocab_file, num_texts=stats.files,
                                        show_progress=not args.no_progress and switched_on())
        settings = f"tokenizer-type: HFTokenizer, vocab-file: {vocab_file}"
    else:
        print(f"[2/3] tokenizer: {args.tokenizer_type}")
        tokenizer = make_tokenizer(args.tokenizer_type, args.vocab_file, args.merge_file)
        settings = f"tokenizer-type: {args.tokenizer_type}"

    print("[3/3] tokenizing into NeoX .bin/.idx")
    summary = preprocess([corpus], os.path.join(args.output_dir, args.name), tokenizer, append_eod=True,
                         workers=args.workers, show_progress=not args.no_progress)
    print(summary)
    print(f"config: data-path: {summary.outputs[0]}, {settings}")


if __name__ == "__main__":
    run_cli(main)
