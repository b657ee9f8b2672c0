"""Preprocessing throughput (tokens/s) with 1, 2, ... worker processes, on this machine.

    python benchmarks/preprocess_throughput.py                       # the prose corpus, GPT-2 BPE
    python benchmarks/preprocess_throughput.py --megabytes 4 --workers 1 2 4

Takes the first `--megabytes` of text of the corpus, runs the real preprocessing (read, tokenize,
write .bin/.idx) with each worker count `--repeats` times, and prints the best tokens/s of each and
its ratio to one worker. It reads data/corpora/prose.jsonl.zst with GPT-2's files in data/ (`python
tools/datasets/prepare_data.py prose gpt2`); without them, the stdlib corpus and the byte-level tokenizer.
"""
import argparse
import json
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))

import zstandard  # noqa: E402

from megatron.data.documents import read_documents  # noqa: E402
from megatron.data.preprocess import preprocess  # noqa: E402
from megatron.data.stdlib_corpus import write_stdlib_corpus  # noqa: E402
from megatron.tokenizer import make_tokenizer  # noqa: E402

# What `python tools/datasets/prepare_data.py prose gpt2` writes.
DATA = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "data"))


def corpus_and_tokenizer(args, workdir):
    prose = os.path.join(DATA, "corpora", "prose.jsonl.zst")
    vocab, merges = os.path.join(DATA, "gpt2-vocab.json"), os.path.join(DATA, "gpt2-merges.txt")
    if all(map(os.path.exists, (prose, vocab, merges))) and not args.stdlib:
        tokenizer = make_tokenizer("GPT2BPETokenizer", vocab, merges)
        return prose, tokenizer, "prose.jsonl.zst, GPT2BPETokenizer"
    path = os.path.join(workdir, "stdlib.jsonl.zst")
    write_stdlib_corpus(path)
    return path, make_tokenizer("ByteLevelTokenizer"), "CPython stdlib, ByteLevelTokenizer"


def first_megabytes(source, megabytes, path):
    """The first documents of `source` up to `megabytes` of text, as a .jsonl.zst at `path`."""
    total, lines = 0, []
    for _, _, (text,) in read_documents([source]):
        lines.append(json.dumps({"text": text}).encode() + b"\n")
        total += len(text.encode())
        if total >= megabytes * 1e6:
            break
    with open(path, "wb") as fh:
        fh.write(zstandard.ZstdCompressor().compress(b"".join(lines)))
    return len(lines), total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=8.0, help="text to tokenize per run")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=2, help="runs per worker count (best is kept)")
    parser.add_argument("--stdlib", action="store_true", help="use the stdlib corpus + byte-level tokenizer")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as workdir:
        source, tokenizer, label = corpus_and_tokenizer(args, workdir)
        subset = os.path.join(workdir, "subset.jsonl.zst")
        documents, text_bytes = first_megabytes(source, args.megabytes, subset)
        print(f"corpus: {label}; {documents:,} documents, {text_bytes / 1e6:.1f} MB of text; "
              f"{os.cpu_count()} CPUs; best of {args.repeats}")
        best = {}
        for workers in args.workers:
            for _ in range(args.repeats):
                start = time.perf_counter()
                summary = preprocess([subset], os.path.join(workdir, "out"), tokenizer, append_eod=True,
                                     workers=workers, show_progress=False)
                rate = summary.tokens / (time.perf_counter() - start)
                best[workers] = max(best.get(workers, 0.0), rate)
            print(f"workers {workers}: {summary.tokens:,} tokens, {best[workers]:,.0f} tokens/s, "
                  f"{best[workers] / best[args.workers[0]]:.2f}x of {args.workers[0]} worker(s)")


if __name__ == "__main__":
    main()
