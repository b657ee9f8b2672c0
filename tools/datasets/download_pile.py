"""Download Pile shards (resumable, checksummed) and cut out the subsets the KERPLE paper used.

    python tools/datasets/download_pile.py --url https://<mirror>/pile/train/00.jsonl.zst \
        --sha256 <hex> --output-dir data/pile --subsets OpenWebText2 ArXiv Github

downloads to data/pile/00.jsonl.zst (an interrupted download resumes with an HTTP Range request;
a checksum mismatch is an error), then writes data/pile/<subset>.jsonl.zst with the documents whose
`meta.pile_set_name` is that subset, and prints the preprocessing command for each.

The Pile's original host no longer serves it: pass the URL of a mirror you can reach. For the paper's three
corpora, tools/datasets/prepare_data.py knows where they are published today and tokenizes them too. This tool was
exercised only against file:// URLs and a local HTTP server in tests/data/test_data_download.py, since
this project's development machines have no internet access.
"""
import argparse
import contextlib
import errno
import fcntl
import hashlib
import http.client
import json
import os
import pathlib
import re
import socket
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
from megatron.quoting import quote  # noqa: E402

CHUNK = 1 << 20


def open_from(url: str, offset: int, validator: str | None):
    """(stream, total size or None, whether the stream starts at `offset` rather than at 0, the validator of
    what is served). A resume asks for the rest only of the same file: `If-Range` with the validator the
    partial was started from (a host whose file changed sends all of it, from byte 0), and a 206's
    `Content-Range` must start at `offset`, else the partial is not extended."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = urllib.request.url2pathname(parsed.path)
        stream = open(path, "rb")
        status = os.fstat(stream.fileno())
        served = f"size={status.st_size} mtime_ns={status.st_mtime_ns}"
        resumed = bool(offset) and validator == served
        stream.seek(offset if resumed else 0)
        return stream, status.st_size, resumed, served
    headers = {"Range": f"bytes={offset}-", "If-Range": validator} if offset and validator else {}
    response = urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60)
    served = response.headers.get("ETag") or response.headers.get("Last-Modified")
    length = response.headers.get("Content-Length")
    if length is not None and not length.strip().isdigit():
        response.close()
        raise DataError(f"downloading {url}: the host answered with Content-Length {quote(length)}, which is not a "
                        "number of bytes; nothing was written. The host is misbehaving: try again later or give "
                        "another source.")
    if response.status != 206:
        return response, int(length) if length else None, False, served
    match = re.fullmatch(r"bytes (\d+)-(\d+)/(\d+|\*)", (response.headers.get("Content-Range") or "").strip())
    if not match or int(match.group(1)) != offset or (served and validator and served != validator):
        response.close()
        raise BadResume(f"asked for bytes {offset}- of the same file, the host answered 206 with Content-Range "
                        f"{quote(response.headers.get('Content-Range'))} and validator {quote(served)}")
    return response, int(match.group(3)) if match.group(3) != "*" else None, True, served


class BadResume(Exception):
    """A 206 answer that does not continue the partial file: the partial is dropped and fetched anew."""


class HostUnreachable(DataError):
    """The host cannot be reached at all (offline, or the host down or blocked): said at once, not retried."""


# A name that does not resolve, a refused connection, no route: waiting a minute does not change these, unlike
# a timeout or a connection cut mid-download (those are retried).
OFFLINE_ERRNOS = {errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH, errno.ENETDOWN}


def unreachable_because(err) -> str | None:
    """Why `err` (opening a connection) means the host cannot be reached at all, or None."""
    reason = getattr(err, "reason", err)
    if isinstance(reason, socket.gaierror):
        return f"its name does not resolve: {reason.strerror}"
    if isinstance(reason, OSError) and reason.errno in OFFLINE_ERRNOS:
        return os.strerror(reason.errno).lower()
    return None


def unreachable(url: str, why: str) -> HostUnreachable:
    host = urllib.parse.urlparse(url).netloc or url
    return HostUnreachable(f"cannot reach {quote(host, 100)} ({why}) for {quote(url)}: this machine is offline, or "
                           "the host is down or blocked; nothing was downloaded, and retrying would not help.")


def check_reachable(url: str) -> None:
    """Connect once to `url`'s host (or the proxy that would carry it): a host that cannot be reached at all is
    a HostUnreachable at once, before a client that retries for a minute is asked (huggingface_hub)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        return
    target = (parsed.hostname, parsed.port or (443 if parsed.scheme == "https" else 80))
    proxy = urllib.request.getproxies().get(parsed.scheme)
    if proxy and not urllib.request.proxy_bypass(parsed.hostname):
        via = urllib.parse.urlparse(proxy if "://" in proxy else f"http://{proxy}")
        target = (via.hostname, via.port or 80)
    try:
        socket.create_connection(target, timeout=30).close()
    except OSError as err:
        why = unreachable_because(err)
        if why:
            raise unreachable(url, why) from None


def download(url: str, destination: str, sha256: str = None, retries: int = 5, show_progress: bool = True):
    """Fetch `url` to `destination` via `destination.partial`, resuming it; verify `sha256`. The partial's
    origin (URL and the host's validator, ETag or Last-Modified) is kept in `destination.partial.origin`
    from the first byte on, and a partial is resumed only for the same URL and validator: otherwise it
    would be spliced to another file. Writing here failing (no space, no permission, a folder in the way)
    is one error at once, never retried: waiting does not fix it."""
    if os.path.exists(destination) and (sha256 is None or file_sha256(destination) == sha256.lower()):
        print(f"{destination} is already there")
        return destination
    partial, origin_file = destination + ".partial", destination + ".partial.origin"
    folder = os.path.dirname(os.path.abspath(destination))
    local(lambda: os.makedirs(folder, exist_ok=True), folder)
    origin = read_origin(origin_file)
    if os.path.exists(partial) and (origin.get("url") != url or not origin.get("validator")):
        why = "it was started from another URL" if origin.get("url") not in (None, url) else \
            "nothing records where it came from" if not origin else "its host gave no ETag or Last-Modified to match"
        print(f"{partial}: not resumed ({why}); downloading {url} from the start")
        local(lambda: os.remove(partial), partial)
    retried = None
    for attempt in range(retries + 1):
        offset = os.path.getsize(partial) if os.path.exists(partial) else 0
        try:
            stream, total, resumed, served = open_from(url, offset, origin.get("validator"))
        except urllib.error.HTTPError as err:
            if err.code == 416 and offset and origin.get("url") == url:  # the range starts at the end: complete
                break
            raise DataError(f"downloading {url}: HTTP {err.code} {quote(err.reason)}.") from err
        except FileNotFoundError as err:  # a file:// URL: waiting brings no file
            raise DataError(f"{url}: no such file; check the path.") from err
        except BadResume as err:
            print(f"{partial}: not resumed ({err}); downloading {url} from the start")
            local(lambda: os.remove(partial), partial)
            continue
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            why = unreachable_because(err)
            if why and attempt == 0:  # not reachable at all; a host lost mid-download is retried
                raise unreachable(url, why) from None
            retried = err
            if attempt == retries:
                break
            time.sleep(2 ** attempt)
            continue
        if not resumed:
            offset = 0
            origin = {"url": url, "validator": served}
            local(lambda: write_origin(origin_file, origin), origin_file)  # before the first byte of the partial
        try:
            with stream, local(lambda: open(partial, "ab" if resumed else "wb"), partial) as out, \
                    Progress(os.path.basename(destination), total=total, initial=offset, unit="B", unit_scale=True,
                             show=show_progress) as progress:
                while chunk := stream.read(CHUNK):
                    local(lambda: out.write(chunk), partial)
                    progress.update(len(chunk))
            # http.client ends a body cut short by the server like a complete one: only its length tells.
            if total is not None and os.path.getsize(partial) < total:
                raise http.client.IncompleteRead(b"", total - os.path.getsize(partial))
            if total is not None and os.path.getsize(partial) > total:
                remove_quietly(partial)
                raise DataError(f"downloading {url}: {partial} holds {os.path.getsize(partial):,} bytes, more than the "
                                f"{total:,} the host announced; it was removed. Run again to download it anew.")
            retried = None
            break
        # A connection cut mid-body is http.client.IncompleteRead, which is no OSError.
        except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
            retried = err
            if attempt < retries:
                time.sleep(2 ** attempt)
    if retried is not None:
        kept = f"{partial} ({os.path.getsize(partial):,} bytes) is kept, run again to resume" \
            if os.path.exists(partial) and os.path.getsize(partial) else "nothing was written"
        raise DataError(f"downloading {url}: {quote(repr(retried))} (after {retries} retries); {kept}.")
    if sha256 is not None:
        actual = file_sha256(partial)
        if actual != sha256.lower():
            os.replace(partial, destination + ".bad-checksum")
            remove_quietly(origin_file)
            raise DataError(f"{url}: sha256 {actual} differs from the expected {sha256}; the download was "
                            f"moved to {destination}.bad-checksum. Check the URL and the checksum, and retry.")
    os.replace(partial, destination)
    remove_quietly(origin_file)
    return destination


def local(write, path):
    """Run `write` (a write to this machine's disk), its OSError turned into one error saying what to do."""
    try:
        return write()
    except OSError as err:
        raise DataError(cannot_write(path, err)) from None


def cannot_write(path, err: OSError) -> str:
    """A failed write to `path` as one sentence with its fix."""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        kept = f"; {path} keeps the {os.path.getsize(path):,} bytes written so far" \
            if os.path.isfile(path) and os.path.getsize(path) else ""
        return (f"no space left on the device writing {path} ({err.strerror}){kept}. Free space there (or give "
                "--data-dir / --output-dir a folder on another disk), then run again: a download resumes.")
    blocker = next((p for p in [pathlib.Path(path), *pathlib.Path(path).parents] if p.exists()), None)
    if isinstance(err, (NotADirectoryError, FileExistsError)) or (blocker and not blocker.is_dir()
                                                                  and blocker != pathlib.Path(path)):
        return (f"cannot write {path}: {blocker} is a file, not a folder. Give --data-dir / --output-dir a folder "
                "(or move that file away).")
    if isinstance(err, IsADirectoryError):
        return f"cannot write {path}: it is a folder. Move it away (a download is a file there), then run again."
    return (f"cannot write {path}: {err.strerror or err}. Give --data-dir / --output-dir a folder this process can "
            "write to (nothing was downloaded into it).")


@contextlib.contextmanager
def one_writer(folder: str):
    """Hold `folder`'s writer lock (an flock on `folder`/.writer.lock, released when the process ends, even
    by kill -9) for the length of the block: two runs writing one data folder would write the same
    partial files. A second run stops at once with one error."""
    local(lambda: os.makedirs(folder, exist_ok=True), folder)
    path = os.path.join(folder, ".writer.lock")
    with local(lambda: open(path, "a+"), path) as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read(200).strip() or "a process"
            raise DataError(f"{folder} is being written by another run ({holder}, holding {path}); two runs writing "
                            "one data folder would write the same files. Wait for it to finish, or give this one "
                            "another folder.") from None
        fh.truncate(0)
        fh.write(f"{os.path.basename(sys.argv[0]) or 'python'}, pid {os.getpid()} on {socket.gethostname()}\n")
        fh.flush()
        yield


def read_origin(path: str) -> dict:
    try:
        with open(path) as fh:
            origin = json.load(fh)
        return origin if isinstance(origin, dict) else {}
    except (OSError, ValueError):
        return {}  # none, or unreadable: the partial is not resumed


def write_origin(path: str, origin: dict) -> None:
    with open(path + ".tmp", "w") as fh:
        json.dump(origin, fh)
    os.replace(path + ".tmp", path)


def remove_quietly(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)


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
    with one_writer(args.output_dir):
        try:
            fetch_and_cut(args)
        except HostUnreachable as err:
            raise DataError(f"{err} Give a --url this machine can reach (a file:// URL for a copy you have).") from None


def fetch_and_cut(args):
    shards = []
    for i, url in enumerate(args.url):
        name = os.path.basename(urllib.parse.unquote(urllib.parse.urlparse(url).path))
        if name in ("", ".", ".."):  # a URL of a folder: never the output folder itself or its parent
            name = f"shard{i}.jsonl.zst"
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
