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
    """Serves one file's bytes, honouring `Range: bytes=N-`; records the ranges it was asked for."""
    payload, ranges = b"", []

    def do_GET(self):
        start = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers["Range"] else 0
        type(self).ranges.append(start)
        body = self.payload[start:]
        self.send_response(206 if start else 200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_file_url_download_verifies_the_checksum(tmp_path, tool):
    source = pile_shard(tmp_path / "00.jsonl.zst")
    digest = hashlib.sha256(source.read_bytes()).hexdigest()
    out = tool.download(source.as_uri(), str(tmp_path / "out.jsonl.zst"), digest, show_progress=False)
    assert open(out, "rb").read() == source.read_bytes()

    with pytest.raises(DataError, match="differs from the expected"):
        tool.download(source.as_uri(), str(tmp_path / "bad.jsonl.zst"), "0" * 64, show_progress=False)
    assert (tmp_path / "bad.jsonl.zst.bad-checksum").exists() and not (tmp_path / "bad.jsonl.zst").exists()


def test_an_interrupted_download_resumes_where_it_stopped(tmp_path, tool):
    source = pile_shard(tmp_path / "00.jsonl.zst").read_bytes()
    half = len(source) // 2
    # file://: a partial file with marker bytes in place of the first half shows the rest was appended.
    (tmp_path / "f.jsonl.zst.partial").write_bytes(b"#" * half)
    tool.download((tmp_path / "00.jsonl.zst").as_uri(), str(tmp_path / "f.jsonl.zst"), show_progress=False)
    assert (tmp_path / "f.jsonl.zst").read_bytes() == b"#" * half + source[half:]

    RangeHandler.payload, RangeHandler.ranges = source, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RangeHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        (tmp_path / "h.jsonl.zst.partial").write_bytes(source[:half])
        url = f"http://127.0.0.1:{server.server_address[1]}/00.jsonl.zst"
        tool.download(url, str(tmp_path / "h.jsonl.zst"), hashlib.sha256(source).hexdigest(), show_progress=False)
    finally:
        server.shutdown()
    assert RangeHandler.ranges == [half]
    assert (tmp_path / "h.jsonl.zst").read_bytes() == source


def test_subsets_are_cut_out_by_pile_set_name(tmp_path, tool):
    shard = pile_shard(tmp_path / "00.jsonl.zst")
    tool.main(["--url", shard.as_uri(), "--output-dir", str(tmp_path / "pile"), "--subsets", "ArXiv", "Github",
               "--no-progress"])
    for name in ("ArXiv", "Github"):
        with open(tmp_path / "pile" / f"{name}.jsonl.zst", "rb") as fh:
            records = [json.loads(line) for line in zstd_lines(fh)]
        assert [r["text"] for r in records] == [f"{name} document {i}" for i in range(30)]
    assert not (tmp_path / "pile" / "Pile-CC.jsonl.zst").exists()
