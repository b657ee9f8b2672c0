"""The built-in default corpus: the CPython standard library of the running interpreter.

One document per `.py` file, in sorted path order, written as lm_dataformat-style JSON lines
(`{"text": ..., "meta": {"source": ..., "path": ...}}`) compressed with zstd (with checksums).
It plays the role of the paper's GitHub (source code) set and needs no download.
"""
import io
import json
import os
import sysconfig
import tokenize
from dataclasses import dataclass

import zstandard

TEST_DIRECTORIES = {"test", "tests", "idle_test"}
SKIPPED_DIRECTORIES = {"site-packages", "dist-packages", "__pycache__"}


@dataclass
class CorpusStats:
    files: int = 0
    bytes: int = 0
    undecodable: int = 0


def stdlib_root() -> str:
    return sysconfig.get_paths()["stdlib"]


def stdlib_python_files(root: str = None, include_tests: bool = False) -> list:
    """Relative paths (posix, sorted) of the library's .py files; test suites only when asked."""
    root = root or stdlib_root()
    found = []
    for directory, subdirectories, files in os.walk(root):
        skipped = SKIPPED_DIRECTORIES | (set() if include_tests else TEST_DIRECTORIES)
        subdirectories[:] = [d for d in subdirectories if d not in skipped]
        for name in files:
            if name.endswith(".py") and (include_tests or not name.startswith("test_")):
                found.append(os.path.relpath(os.path.join(directory, name), root).replace(os.sep, "/"))
    return sorted(found)


def read_source(path: str) -> str:
    """The text of a Python file in its declared encoding (PEP 263), as the interpreter reads it."""
    with open(path, "rb") as fh:
        raw = fh.read()
    encoding, _ = tokenize.detect_encoding(io.BytesIO(raw).readline)
    return raw.decode(encoding)


def write_stdlib_corpus(output_path: str, include_tests: bool = False, max_bytes: int = None,
                        root: str = None) -> CorpusStats:
    """Write the corpus to `output_path` (.jsonl.zst). With `max_bytes`, files that would pass the cap
    are left out (smaller ones after them still fit), so a small corpus still has many documents."""
    root = root or stdlib_root()
    stats = CorpusStats()
    os.makedirs(os.path.dirname(os.path.abspath(output_path)), exist_ok=True)
    partial = output_path + ".partial"
    compressor = zstandard.ZstdCompressor(level=10, write_checksum=True)
    with open(partial, "wb") as raw, compressor.stream_writer(raw) as out:
        for relative in stdlib_python_files(root, include_tests):
            try:
                text = read_source(os.path.join(root, relative))
            except (SyntaxError, UnicodeDecodeError):  # a broken coding cookie or bytes (test data)
                stats.undecodable += 1
                continue
            size = len(text.encode("utf-8"))
            if max_bytes is not None and stats.bytes + size > max_bytes:
                continue
            record = {"text": text, "meta": {"source": "cpython-stdlib", "path": relative}}
            out.write(json.dumps(record, ensure_ascii=False).encode("utf-8") + b"\n")
            stats.files += 1
            stats.bytes += size
    os.replace(partial, output_path)
    return stats
