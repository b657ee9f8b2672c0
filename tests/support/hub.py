"""A local stand-in for tools/datasets/prepare_data.py's hosts (no machine here reaches the internet), shared by
its in-process tests (tests/data/test_prepare_data.py) and those that start a process or mount a disk
(tests/e2e/data/test_prepare_data.py): a server in a thread of the test process that answers Hugging Face's tree
listing and file URLs the way the hub does (Range requests included), tiny corpora in the formats the real
sources use, and a tiny GPT-2-format BPE vocabulary pinned in the tool's SOURCES."""
import hashlib
import http.server
import json
import threading
import urllib.parse
from dataclasses import replace

import pytest
import zstandard


class Hub(http.server.BaseHTTPRequestHandler):
    """Files by URL path; /api/<kind>s/<owner>/<name>/tree/<revision>[/<folder>] lists those under
    /[datasets/]<owner>/<name>/resolve/<revision>/ with their sizes and sha256 (as LFS files), and a path in
    `cut_once` is cut off halfway the first time it is asked for. Like the hub, each file has an ETag, and a
    Range request with an `If-Range` that is not the file's ETag gets the whole file (200). Misbehaving on
    purpose: a path in `from_zero` answers a Range request with 206 and the body from byte 0, one in
    `bad_length` sends `Content-Length: abc`; `listed` adds names to the tree listing (path -> body)."""
    files, requests, cut_once, wrong_sha256, from_zero, bad_length, listed = {}, [], set(), set(), set(), set(), {}

    def do_GET(self):
        path = urllib.parse.unquote(urllib.parse.urlparse(self.path).path)
        type(self).requests.append((path, self.headers["Range"]))
        if path.startswith("/api/"):
            return self.listing(path)
        body = self.files.get(path)
        if body is None:
            self.send_error(404)
            return
        etag = f'"{hashlib.sha1(body).hexdigest()}"'
        asked = int(self.headers["Range"].split("=")[1].rstrip("-")) if self.headers["Range"] else 0
        start = asked if self.headers["If-Range"] in (None, etag) else 0
        if path in self.from_zero and asked:
            start = 0
        self.send_response(206 if asked and (start or path in self.from_zero) else 200)
        self.send_header("ETag", etag)
        if asked and (start or path in self.from_zero):
            self.send_header("Content-Range", f"bytes {start}-{len(body) - 1}/{len(body)}")
        self.send_header("Content-Length", "abc" if path in self.bad_length else str(len(body) - start))
        self.end_headers()
        if path in self.cut_once:
            self.cut_once.discard(path)
            self.wfile.write(body[start:start + (len(body) - start) // 2])
            return  # HTTP/1.0: the connection closes here, short of the promised length
        self.wfile.write(body[start:])

    def listing(self, path):
        if len(path.split("/")) < 7 or path.split("/")[5] != "tree":  # the client's other calls: none needed here
            self.send_error(404)
            return
        kind, owner, name, _, revision, *folder = path.split("/")[2:]
        root = f"{'/datasets' if kind == 'datasets' else ''}/{owner}/{name}/resolve/{revision}/"
        entries = [{"type": "file", "path": key[len(root):], "size": len(body), "oid": hashlib.sha1(body).hexdigest(),
                    "lfs": {"oid": "0" * 64 if key in self.wrong_sha256 else hashlib.sha256(body).hexdigest(),
                            "size": len(body), "pointerSize": 134}}
                   for key, body in sorted(self.files.items()) if key.startswith(root + "/".join(folder))]
        entries += [{"type": "file", "path": name, "size": len(body), "oid": hashlib.sha1(body).hexdigest()}
                    for name, body in self.listed.items()]
        payload = json.dumps(entries if entries else {"error": "Repository not found"}).encode()
        self.send_response(200 if entries else 404)
        if not entries:
            self.send_header("X-Error-Code", "RepoNotFound")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def hub(monkeypatch):
    Hub.files, Hub.requests, Hub.cut_once, Hub.wrong_sha256 = {}, [], set(), set()
    Hub.from_zero, Hub.bad_length, Hub.listed = set(), set(), {}
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hub)
    server.timeout = 10
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("HF_ENDPOINT", url)
    monkeypatch.setenv("NEOX_PROGRESS", "0")
    # Online, whatever ran before in this process: tests/e2e/evaluation/test_lm_eval.py sets HF_HUB_OFFLINE=1 when
    # it is imported, and huggingface_hub reads the variable once, into a constant, at its own import.
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    import huggingface_hub.constants
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    yield Hub, url
    server.shutdown()
    server.server_close()
    thread.join(timeout=10)


def texts(name, count):
    return [f"{name} document {i}: def f(x):\n    return x + {i}\n" for i in range(count)]


@pytest.fixture
def tiny_gpt2(tmp_path_factory, tool, monkeypatch):
    """A GPT-2-format byte-level BPE (vocab.json, merges.txt) trained on the test texts, pinned in SOURCES."""
    from tokenizers import ByteLevelBPETokenizer

    folder = tmp_path_factory.mktemp("gpt2")
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(texts("Github", 20) + texts("ArXiv", 20), vocab_size=300,
                            special_tokens=["<|endoftext|>"], show_progress=False)
    bpe.save_model(str(folder))
    files = {name: (folder / name).read_bytes() for name in ("vocab.json", "merges.txt")}
    gpt2 = tool.SOURCES["gpt2"]
    pinned = {name: replace(pin, size=len(files[name]), sha256=hashlib.sha256(files[name]).hexdigest())
              for name, pin in gpt2.pinned.items()}
    monkeypatch.setitem(tool.SOURCES, "gpt2", replace(gpt2, pinned=pinned))
    return {f"/openai-community/gpt2/resolve/{tool.GPT2_REVISION}/{name}": body for name, body in files.items()}


def jsonl_zst(records):
    return zstandard.ZstdCompressor().compress(b"".join(json.dumps(r).encode() + b"\n" for r in records))
