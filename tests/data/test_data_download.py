"""The Pile download helper, exercised the only ways possible without internet: file:// URLs and a
local HTTP server that honours Range requests (as real mirrors do)."""
import hashlib
import http.server
import importlib.util
import json
import threading

import pytest
import zstandard

from megatron.data import DataError
from megatron.data.documents import zstd_lines


@pytest.fixture
def tool(repo_root):
    spec = importlib.util.spec_from_file_location("download_pile", repo_root / "tools/datasets/download_pile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pile_shard(path):
    records = [{"text": f"{name} document {i}", "meta": {"pile_set_name": name}}
               for i in range(30) for name in ("ArXiv", "Pile-CC", "Github", "OpenWebText2")]
    path.write_bytes(zstandard.ZstdCompressor().compress(b"".join(json.dumps(r).encode() + b"\n" for r in records)))
    return path


class RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Serves one file's bytes with an ETag, honouring `Range: bytes=N-` (with `If-Range`: only if it is
    that ETag, else the whole file, as HTTP says); records the ranges it was asked for. Misbehaving:
    `from_zero` answers a Range request with 206 and the body from byte 0; `ignores_if_range` answers it
    with 206 from the byte asked whatever If-Range names (its ETag is the file it serves now)."""
    payload, ranges, from_zero, ignores_if_range = b"", [], False, False

    def do_GET(self):
        etag = f'"{hashlib.sha1(self.payload).hexdigest()}"'
        asked = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers["Range"] else 0
        type(self).ranges.append(asked)
        start = 0 if self.from_zero or (self.headers["If-Range"] not in (None, etag) and not self.ignores_if_range) \
            else asked
        body = self.payload[start:]
        partial = asked and (start or self.from_zero)
        self.send_response(206 if partial else 200)
        self.send_header("ETag", etag)
        if partial:
            self.send_header("Content-Range", f"bytes {start}-{len(self.payload) - 1}/{len(self.payload)}")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    RangeHandler.payload, RangeHandler.ranges, RangeHandler.from_zero, RangeHandler.ignores_if_range = b"", [], False, False
    running = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    threading.Thread(target=running.serve_forever, daemon=True).start()
    yield RangeHandler, f"http://127.0.0.1:{running.server_address[1]}/00.jsonl.zst"
    running.shutdown()
    running.server_close()


def etag(body):
    return f'"{hashlib.sha1(body).hexdigest()}"'


def test_file_url_download_verifies_the_checksum(tmp_path, tool):
    source = pile_shard(tmp_path / "00.jsonl.zst")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    out = tool.download(source.as_uri(), str(tmp_path / "out.jsonl.zst"), digest, show_progress=False)
    assert open(out, "rb").read() == source.read_bytes()

    with pytest.raises(DataError, match="differs from the expected"):
        tool.download(source.as_uri(), str(tmp_path / "bad.jsonl.zst"), "0" * 64, show_progress=False)
    assert (tmp_path / "bad.jsonl.zst.bad-checksum").exists() and not (tmp_path / "bad.jsonl.zst").exists()


def test_an_interrupted_download_resumes_where_it_stopped(tmp_path, tool, server):
    source = pile_shard(tmp_path / "00.jsonl.zst")
    body = source.read_bytes()
    half = len(body) // 2
    # file://: a partial file with marker bytes in place of the first half shows the rest was appended; its
    # origin (the URL, and the file's size and mtime as validator) is what an interrupted run left beside it.
    (tmp_path / "f.jsonl.zst.partial").write_bytes(b"#" * half)
    status = source.stat()
    tool.write_origin(str(tmp_path / "f.jsonl.zst.partial.origin"),
                      {"url": source.as_uri(), "validator": f"size={status.st_size} mtime_ns={status.st_mtime_ns}"})
    tool.download(source.as_uri(), str(tmp_path / "f.jsonl.zst"), show_progress=False)
    assert (tmp_path / "f.jsonl.zst").read_bytes() == b"#" * half + body[half:]
    assert not (tmp_path / "f.jsonl.zst.partial.origin").exists()

    handler, url = server
    handler.payload = body
    (tmp_path / "h.jsonl.zst.partial").write_bytes(body[:half])
    tool.write_origin(str(tmp_path / "h.jsonl.zst.partial.origin"), {"url": url, "validator": etag(body)})
    tool.download(url, str(tmp_path / "h.jsonl.zst"), hashlib.sha256(body).hexdigest(), show_progress=False)
    assert handler.ranges == [half]
    assert (tmp_path / "h.jsonl.zst").read_bytes() == body


# Issue 40 rows 5 and 6: a partial is resumed only against the file it came from.
def test_a_partial_of_another_file_is_never_extended(tmp_path, tool, server, capsys):
    handler, url = server
    old, new = b"old file " * 1000, b"new file " * 1200
    handler.payload = new
    partial = tmp_path / "h.jsonl.zst.partial"
    cases = {"another URL": {"url": url + "?other", "validator": etag(new)},  # --source named another file
             "the file changed": {"url": url, "validator": etag(old)},      # the host's If-Range answer: 200
             "no origin": None}                                             # left by an older version
    for case, origin in cases.items():
        partial.write_bytes(old[:4000])
        if origin:
            tool.write_origin(str(partial) + ".origin", origin)
        handler.ranges = []
        tool.download(url, str(tmp_path / "h.jsonl.zst"), show_progress=False)
        assert (tmp_path / "h.jsonl.zst").read_bytes() == new, case
        (tmp_path / "h.jsonl.zst").unlink()
    out = capsys.readouterr().out
    assert "not resumed (it was started from another URL)" in out
    assert "not resumed (nothing records where it came from)" in out


def test_a_206_that_does_not_continue_the_partial_is_not_appended(tmp_path, tool, server, capsys):
    handler, url = server
    body = b"0123456789" * 1000
    handler.payload, handler.from_zero = body, True
    (tmp_path / "h.partial").write_bytes(body[:5000])
    tool.write_origin(str(tmp_path / "h.partial.origin"), {"url": url, "validator": etag(body)})
    handler.from_zero = True
    tool.download(url, str(tmp_path / "h"), show_progress=False)
    assert (tmp_path / "h").read_bytes() == body  # not the first half twice
    assert "answered 206 with Content-Range 'bytes 0-9999/10000'" in capsys.readouterr().out


def test_a_206_of_a_file_with_another_etag_is_not_appended(tmp_path, tool, server, capsys):
    """A host that ignores If-Range answers the resume with 206 and the right Content-Range, but of the file
    it serves now, whose ETag is not the partial's: its bytes would be spliced to the old file's."""
    handler, url = server
    old, new = b"old file " * 1000, b"new file " * 1000
    handler.payload, handler.ignores_if_range = new, True
    (tmp_path / "h.partial").write_bytes(old[:4000])
    tool.write_origin(str(tmp_path / "h.partial.origin"), {"url": url, "validator": etag(old)})
    tool.download(url, str(tmp_path / "h"), show_progress=False)
    assert handler.ranges == [4000, 0]  # the resume asked for, refused, then the whole file
    assert (tmp_path / "h").read_bytes() == new
    assert (f"answered 206 with Content-Range 'bytes 4000-8999/9000' and validator '{etag(new)}'"
            in capsys.readouterr().out)


def test_a_zstd_bomb_is_refused_without_reading_it_whole(tmp_path, tool):
    """512 MiB of one line, 16 KB compressed: stopped at the line limit (256 MiB), one error."""
    with open(tmp_path / "bomb.jsonl.zst", "wb") as raw, zstandard.ZstdCompressor().stream_writer(raw) as writer:
        for _ in range(512):
            writer.write(b"a" * (1 << 20))
    with pytest.raises(DataError, match="a line decompresses to more than 256 MiB, longer than any document"):
        tool.main(["--url", (tmp_path / "bomb.jsonl.zst").as_uri(), "--output-dir", str(tmp_path / "pile"),
                   "--no-progress"])


def test_one_output_folder_has_one_writer(tmp_path, tool):
    shard = pile_shard(tmp_path / "00.jsonl.zst")
    with tool.one_writer(str(tmp_path / "pile")):  # another run holds the folder
        with pytest.raises(DataError, match=r"is being written by another run \(.*pid \d+"):
            tool.main(["--url", shard.as_uri(), "--output-dir", str(tmp_path / "pile"), "--no-progress"])
    tool.main(["--url", shard.as_uri(), "--output-dir", str(tmp_path / "pile"), "--no-progress", "--subsets"])
    assert (tmp_path / "pile" / "00.jsonl.zst").read_bytes() == shard.read_bytes()


def test_subsets_are_cut_out_by_pile_set_name(tmp_path, tool):
    shard = pile_shard(tmp_path / "00.jsonl.zst")
    tool.main(["--url", shard.as_uri(), "--output-dir", str(tmp_path / "pile"), "--subsets", "ArXiv", "Github",
               "--no-progress"])
    for name in ("ArXiv", "Github"):
        with open(tmp_path / "pile" / f"{name}.jsonl.zst", "rb") as fh:
            records = [json.loads(line) for line in zstd_lines(fh)]
        assert [r["text"] for r in records] == [f"{name} document {i}" for i in range(30)]
    assert not (tmp_path / "pile" / "Pile-CC.jsonl.zst").exists()
