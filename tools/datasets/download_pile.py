"""Download Pile shards (resumable, checksummed) and cut out the subsets the KERPLE paper used.

    python tools/datasets/download_pile.py --url https://<mirror>/pile/train/00.jsonl.zst \
        --sha256 <hex> --output-dir data/pile --subsets OpenWebText2 ArXiv Github

downloads to data/pile/00.jsonl.zst (an interrupted download resumes with an HTTP Range request;
a checksum mismatch is an error), then writes data/pile/<subset>.jsonl.zst with the documents whose
`meta.pile_set_name` is that subset, and prints the preprocessing command for each.

The Pile's original host no longer serves it: pass the URL of a mirror you can reach. For the paper's three
corpora, tools/datasets/prepare_data.py knows where they are published today and tokenizes them too. This tool was
exercised only against file:// URLs and a local HTTP server in tests/test_data_download.py, since
this project's development machines have no internet access.
"""
import argparse
import hashlib
import http.client
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import zstandard

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

from megatron.data.documents import zstd_lines  # noqa: E402
from megatron.data.errors import DataError  # noqa: E402
from megatron.neox_arguments import run_cli  # noqa: E402
from megatron.progress import Progress  # noqa: E402

CHUNK = 1 << 20


def open_from(url: str, offset: int):
    """(stream, total size or None, whether the stream starts at `offset` rather than at 0)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = urllib.request.url2pathname(parsed.path)
        stream = open(path, "rb")
        stream.seek(offset)
        return stream, os.path.getsize(path), True
    request = urllib.request.Request(url, headers={"Range": f"bytes={offset}-"} if offset else {})
    response = urllib.request.urlopen(request, timeout=60)
    resumed = response.status == 206
    length = response.headers.get("Content-Length")
    total = int(length) + (offset if resumed else 0) if length else None
    return response, total, resumed


def download(url: str, destination: str, sha256: str = None, retries: int = 5, show_progress: bool = True):
    """Fetch `url` to `destination` via `destination.partial`, resuming it; verify `sha256`."""
    if os.path.exists(destination) and (sha256 is None or file_sha256(destination) == sha256.lower()):
        print(f"{destination} is already there")
        return destination
    partial = destination + ".partial"
    os.makedirs(os.path.dirname(os.path.abspath(destination)), exist_ok=True)
    for attempt in range(retries + 1):
        offset = os.path.getsize(partial) if os.path.exists(partial) else 0
        try:
            stream, total, resumed = open_from(url, offset)
        except urllib.error.HTTPError as err:
            if err.code == 416:  # the range starts at the end: the partial file is complete
                break
            raise DataError(f"downloading {url}: HTTP {err.code} {err.reason}.") from err
        except FileNotFoundError as err:  # a file:// URL: waiting brings no file
            raise DataError(f"{url}: no such file; check the path.") from err
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            if attempt == retries:
                raise DataError(f"downloading {url}: {err} (after {retries} retries).") from err
            time.sleep(2 ** attempt)
            continue
        if not resumed:
            offset = 0
        try:
            with stream, open(partial, "ab" if resumed else "wb") as out, \
                    Progress(os.path.basename(destination), total=total, initial=offset, unit="B", unit_scale=True,
                             show=show_progress) as progress:
                while chunk := stream.read(CHUNK):
                    out.write(chunk)
                    progress.update(len(chunk))
            # http.client ends a body cut short by the server like a complete one: only its length tells.
            if total is not None and os.path.getsize(partial) < total:
                raise http.client.IncompleteRead(b"", total - os.path.getsize(partial))
            break
        # A connection cut mid-body is http.client.IncompleteRead, which is no OSError.
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            if attempt == retries:
                raise DataError(f"downloading {url}: {err!r}; {partial} is kept, run again to resume.") from err
            time.sleep(2 ** attempt)
    if sha256 is not None:
        actual = file_sha256(partial)
        if actual != sha256.lower():
            os.replace(partial, destination + ".bad-checksum")
            raise DataError(f"{url}: sha256 {actual} differs from the expected {sha256}; the download was "
                            f"moved to {destination}.bad-checksum. Check the URL and the checksum, and retry.")
    os.replace(partial, destination)
    return destination


def file_sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def extract_subsets(shards, subsets, output_dir: str) -> dict:
    """Write <output_dir>/<subset>.jsonl.zst with each subset's documents; returns counts."""
    paths = {name: os.path.join(output_dir, f"{name}.jsonl.zst") for name in subsets}
    counts = dict.fromkeys(subsets, 0)
    # One compressor per output: a ZstdCompressor holds one stream's state at a time.
    writers = {name: zstandard.ZstdCompressor(level=3, write_checksum=True).stream_writer(open(path + ".partial", "wb"))
               for name, path in paths.items()}
    try:
        for shard in shards:
            with open(shard, "rb") as fh:
                for lineno, line in enumerate(zstd_lines(fh), start=1):
                    try:
                        name = json.loads(line)["meta"]["pile_set_name"]
                    except (ValueError, KeyError, TypeError) as err:
                        raise DataError(f"{shard}, line {lineno}: not a Pile record with meta.pile_set_name "
                                        f"({type(err).__name__}: {err}).") from err
                    if name in writers:
                        writers[name].write(line + b"\n")
                        counts[name] += 1
    except BaseException:
        for name, writer in writers.items():
            writer.close()
            os.remove(paths[name] + ".partial")
        raise
    for name, writer in writers.items():
        writer.close()
        os.replace(paths[name] + ".partial", paths[name])
    return counts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", required=True, nargs="+", help="Pile shard URLs (.jsonl.zst); file:// works too")
    parser.add_argument("--sha256", nargs="+", help="expected checksums, one per URL, in order")
    parser.add_argument("--output-dir", default="data/pile")
    parser.add_argument("--subsets", nargs="*", default=["OpenWebText2", "ArXiv", "Github"],
                        help="meta.pile_set_name values to cut out (default: the paper's three); none: skip")
    parser.add_argument("--retries", type=int, default=5)
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    if args.sha256 and len(args.sha256) != len(args.url):
        raise DataError(f"--sha256 gives {len(args.sha256)} checksums for {len(args.url)} URLs; give one per URL.")
    os.makedirs(args.output_dir, exist_ok=True)
    shards = []
    for i, url in enumerate(args.url):
        name = os.path.basename(urllib.parse.urlparse(url).path) or f"shard{i}.jsonl.zst"
        shards.append(download(url, os.path.join(args.output_dir, name), args.sha256[i] if args.sha256 else None,
                               args.retries, not args.no_progress))
    if args.subsets:
        counts = extract_subsets(shards, args.subsets, args.output_dir)
        for name, count in counts.items():
            prefix = os.path.join(args.output_dir, name.lower())
            print(f"{name}: {count:,} documents -> {args.output_dir}/{name}.jsonl.zst\n"
                  f"  python tools/datasets/preprocess_data.py --input {args.output_dir}/{name}.jsonl.zst "
                  f"--output-prefix {prefix} --tokenizer-type GPT2BPETokenizer --vocab-file <gpt2-vocab.json> "
                  f"--merge-file <gpt2-merges.txt> --append-eod --workers 8")


if __name__ == "__main__":
    run_cli(main)
