"""Read documents from the files users bring: .jsonl, .jsonl.zst, .txt and lm_dataformat's archives.

JSON lines are read one line at a time so that bad input (invalid JSON or UTF-8, a missing key, a
corrupt or truncated .zst, an empty file) is reported with its file and line, and can be skipped
and counted instead of stopping the run. The text of a JSON object follows lm_dataformat's rules
(`handle_jsonl`: a list of paragraphs is joined by blank lines, a bare string line is the text).
"""
import glob
import json
import os
from collections import Counter

import lm_dataformat
import zstandard

from .errors import DataError

LINE_FORMATS = (".jsonl", ".jsonl.zst")
# Whole-archive formats lm_dataformat reads; errors there can only be located by document number.
ARCHIVE_FORMATS = tuple(ext for ext in lm_dataformat.VALID_EXTENSIONS if ext not in LINE_FORMATS + (".txt",))


class InputProblems:
    """Bad input either stops the run (the default) or is skipped and counted (`skip=True`)."""

    def __init__(self, skip: bool):
        self.skip = skip
        self.counts = Counter()
        self.first_messages = []

    def report(self, path: str, where: str, kind: str, detail: str):
        message = f"{path}, {where}: {kind}: {detail}"
        if not self.skip:
            raise DataError(f"{message}. Fix or remove that input, or pass --skip-bad-input to skip "
                            "bad lines and files and count them. Nothing was written.")
        self.counts[kind] += 1
        if len(self.first_messages) < 5:
            self.first_messages.append(message)


def expand_inputs(inputs) -> list:
    """Files named by `inputs` (files, directories, globs; comma-separated like NeoX), in order."""
    files = []
    for item in (part for entry in inputs for part in str(entry).split(",") if part):
        matches = sorted(glob.glob(item)) if glob.has_magic(item) else [item]
        if not matches:
            raise DataError(f"--input {item} matches no file.")
        for path in matches:
            if os.path.isdir(path):
                found = lm_dataformat.listdir_or_file(path)
                if not found:
                    raise DataError(f"--input directory {path} holds no readable file "
                                    f"(extensions: {', '.join(lm_dataformat.VALID_EXTENSIONS)}).")
                files.extend(found)
            elif not os.path.isfile(path):
                raise DataError(f"--input {path} does not exist.")
            elif not lm_dataformat.has_valid_extension(path):
                raise DataError(f"--input {path}: unsupported file type; use one of "
                                f"{', '.join(lm_dataformat.VALID_EXTENSIONS)}.")
            else:
                files.append(path)
    return files


def read_documents(files, keys=("text",), problems: InputProblems = None):
    """Yield (path, location, texts) for every document; `texts` holds one string per key."""
    problems = problems or InputProblems(skip=False)
    for path in files:
        if os.path.getsize(path) == 0:
            problems.report(path, "whole file", "empty file", "it holds no documents")
            continue
        if path.endswith(LINE_FORMATS):
            yield from _read_json_lines(path, keys, problems)
        elif path.endswith(".txt"):
            yield from _read_txt(path, keys, problems)
        else:
            yield from _read_archive(path, keys, problems)


def _read_json_lines(path, keys, problems):
    lineno = 0
    with open(path, "rb") as fh:
        lines = zstd_lines(fh) if path.endswith(".zst") else fh
        try:
            for lineno, raw in enumerate(lines, start=1):
                if not raw.strip():
                    continue
                texts = _parse_line(raw, keys, path, lineno, problems)
                if texts is not None:
                    yield path, f"line {lineno}", texts
        except zstandard.ZstdError as err:
            problems.report(path, f"line {lineno + 1}", "corrupt zstd data",
                            f"{err}; the rest of the file cannot be read")
            return
    if lineno == 0:
        problems.report(path, "whole file", "empty file", "it holds no lines")


def _parse_line(raw: bytes, keys, path, lineno, problems):
    where = f"line {lineno}"
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        problems.report(path, where, "invalid UTF-8", f"byte {err.start} of the line is not UTF-8")
        return None
    try:
        obj = json.loads(line)
    except ValueError as err:
        problems.report(path, where, "invalid JSON", str(err))
        return None
    texts = []
    for key in keys:
        try:
            text = next(lm_dataformat.handle_jsonl([obj], False, True, "\n\n", key))
        except (KeyError, TypeError):
            problems.report(path, where, "missing key", f"the JSON object has no key '{key}' "
                            f"(its keys: {', '.join(obj) if isinstance(obj, dict) else 'none'}); "
                            "choose the key with --jsonl-keys")
            return None
        if not isinstance(text, str):
            problems.report(path, where, "not text", f"'{key}' holds a {type(text).__name__}, not a string")
            return None
        texts.append(text)
    return tuple(texts)


def _read_txt(path, keys, problems):
    """A .txt file is one document (as in lm_dataformat), decoded strictly as UTF-8."""
    raw = open(path, "rb").read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        problems.report(path, f"line {line}", "invalid UTF-8", f"byte {err.start} of the file is not UTF-8")
        return
    yield path, "whole file", (text,) * len(keys)


def _read_archive(path, keys, problems):
    if len(keys) != 1:
        raise DataError(f"{path}: several --jsonl-keys need JSON-lines input (.jsonl, .jsonl.zst).")
    count = 0
    try:
        for item in lm_dataformat.Reader(path)._stream_data(jsonl_key=keys[0]):
            count += 1
            text = item if isinstance(item, str) else next(lm_dataformat.handle_jsonl([item], False, True, "\n\n", keys[0]))
            yield path, f"document {count}", (text,)
    except (OSError, ValueError, KeyError, EOFError, zstandard.ZstdError) as err:
        problems.report(path, f"document {count + 1}", "unreadable archive", f"{type(err).__name__}: {err}")


# A zstd block inflates at most about 32,768-fold, so one call given PIECE compressed bytes returns at most
# 256 MiB: memory stays bounded whatever the file holds (a "zstd bomb" of one endless line included).
PIECE = 8 << 10
MAX_LINE_BYTES = 256 << 20  # far above any real document (the Pile's longest are tens of MB)


def zstd_lines(fh, chunk_size: int = 1 << 20, max_line: int = MAX_LINE_BYTES):
    """Lines of a zstd file of one or more frames. Raises ZstdError on corrupt data and on a file
    that ends inside a frame (zstandard's stream reader reports truncation as a clean end), and
    DataError on a line longer than `max_line` bytes, decompressing no more than that."""
    dctx = zstandard.ZstdDecompressor()
    decoder, in_frame, pending = dctx.decompressobj(), False, bytearray()
    while chunk := fh.read(chunk_size):
        for start in range(0, len(chunk), PIECE):
            piece = chunk[start:start + PIECE]
            while piece:
                in_frame = True
                out = decoder.decompress(piece)
                if decoder.eof:
                    piece, decoder, in_frame = decoder.unused_data, dctx.decompressobj(), False
                else:
                    piece = b""
                end = out.rfind(b"\n")
                if end >= 0:
                    pending += out[:end]
                    yield from map(bytes, pending.split(b"\n"))
                    pending = bytearray(out[end + 1:])
                else:
                    pending += out
                if len(pending) > max_line:
                    raise DataError(f"{getattr(fh, 'name', 'the zstd data')}: a line decompresses to more than "
                                    f"{max_line >> 20} MiB, longer than any document (a zstd bomb, or not JSON "
                                    "lines); it was not read further. Check the file, or give another source.")
    if in_frame:  # the partial line before the cut is not yielded: it is not a whole document
        raise zstandard.ZstdError("the file ends in the middle of a zstd frame (truncated)")
    if pending:
        yield bytes(pending)
