"""tools/datasets/prepare_data.py, in-process, against a local stand-in for its hosts (tests/support/hub.py: a
server in a thread of the test process that answers Hugging Face's tree listing and file URLs the way the hub
does, Range requests included), serving tiny corpora in the formats the real sources use (parquet, .jsonl.zst,
.jsonl.zst.tar) and a tiny GPT-2-format BPE vocabulary. Its command line, an unwritable data folder and a full
disk (which start processes): tests/e2e/data/test_prepare_data.py."""
import hashlib
import io
import json
import os
import re
import tarfile

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from megatron.core.datasets.indexed_dataset import IndexedDataset

from megatron.data import DataError
from megatron.tokenizer import make_tokenizer
from tests.support.data import tool  # noqa: F401 (the fixture: prepare_data.py as a module)
from tests.support.hub import hub, jsonl_zst, texts, tiny_gpt2  # noqa: F401 (hub, tiny_gpt2: fixtures)

GITHUB = "/datasets/parameterlab/scaling_mia_the_pile_00_Github/resolve/1fd6041f61a68497843d22b41b9ac863666c9a5a/data/"
OWT2 = "/datasets/segyges/OpenWebText2/resolve/0033d7329c92ba163afa4c510f83f3c186d00210/openwebtext2.jsonl.zst.tar"


def parquet_bytes(rows):
    sink = io.BytesIO()
    pq.write_table(pa.table({"text": [t for t, _ in rows], "meta": [{"pile_set_name": s} for _, s in rows]}), sink)
    return sink.getvalue()


def read_back(prefix, tokenizer):
    dataset = IndexedDataset(str(prefix))
    return [tokenizer.detokenize(dataset[i][:-1].tolist()) for i in range(len(dataset))], dataset


def run(tool, capsys, *argv):
    tool.main(list(argv) + ["--workers", "1", "--no-progress"])
    return capsys.readouterr().out


def test_github_is_downloaded_checked_and_tokenized_where_the_configs_read_it(tmp_path, tool, hub, tiny_gpt2, capsys):
    server, _ = hub
    server.files.update(tiny_gpt2)
    # Two parquet files, as the hub splits a dataset; one document of another Pile subset is left out.
    server.files[GITHUB + "train-00000-of-00002.parquet"] = parquet_bytes([(t, "Github") for t in texts("Github", 3)])
    server.files[GITHUB + "train-00001-of-00002.parquet"] = parquet_bytes(
        [("stray ArXiv text", "ArXiv")] + [(t, "Github") for t in texts("Github", 5)[3:]])
    out = run(tool, capsys, "github", "--data-dir", str(tmp_path / "data"))

    data = tmp_path / "data"
    assert (data / "gpt2-vocab.json").read_bytes() == tiny_gpt2[next(iter(tiny_gpt2))]
    tokenizer = make_tokenizer("GPT2BPETokenizer", str(data / "gpt2-vocab.json"), str(data / "gpt2-merges.txt"))
    documents, dataset = read_back(data / "github/github_text_document", tokenizer)
    assert documents == texts("Github", 5)
    assert all(dataset[i][-1] == tokenizer.eod for i in range(len(dataset)))

    record = json.loads((data / "github/SOURCE.json").read_text())
    assert record["complete"] and record["label"].startswith("SUBSTITUTE") and record["documents"] == 5
    assert [f["sha256"] for f in record["files"]] == [hashlib.sha256(server.files[GITHUB + n]).hexdigest() for n in
                                                      ("train-00000-of-00002.parquet", "train-00001-of-00002.parquet")]
    assert all(f["checksum"] == "sha256 published by the host (Hugging Face LFS)" for f in record["files"])
    assert "SUBSTITUTE" in out and "SUBSTITUTE" in (data / "github/SOURCE.md").read_text()
    assert not list(data.rglob("*.partial")) and not (data / "github/github.jsonl.zst").exists()

    # Everything is there: a second run asks the server for nothing and says so.
    server.requests.clear()
    out = run(tool, capsys, "github", "--data-dir", str(data))
    assert "nothing to do" in out and server.requests == []
    # Another source for a prepared dataset is refused, naming both and what to do.
    with pytest.raises(DataError, match=r"was prepared from hf://datasets/parameterlab/.*, not from file://.*Remove"):
        tool.main(["github", "--data-dir", str(data), "--source", f"github={data / 'gpt2-merges.txt'}"])


def test_openwebtext2_is_read_from_its_jsonl_zst_tar(tmp_path, tool, hub, tiny_gpt2, capsys):
    server, _ = hub
    server.files.update(tiny_gpt2)
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w") as tar:  # one .jsonl.zst per month, as in the Pile's file
        for month, chunk in (("2019-01", texts("web", 4)[:2]), ("2019-02", texts("web", 4)[2:])):
            # Each month's second line is a bare string, which lm_dataformat's rules take as the text.
            body = jsonl_zst([{"text": t, "meta": {"url": "https://example.org"}} for t in chunk[:1]] + chunk[1:])
            info = tarfile.TarInfo(f"{month}.jsonl.zst")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    server.files[OWT2] = archive.getvalue()
    out = run(tool, capsys, "openwebtext2", "--data-dir", str(tmp_path))

    tokenizer = make_tokenizer("GPT2BPETokenizer", str(tmp_path / "gpt2-vocab.json"), str(tmp_path / "gpt2-merges.txt"))
    assert read_back(tmp_path / "openwebtext2/openwebtext2_text_document", tokenizer)[0] == texts("web", 4)
    assert "the paper's corpus" in out and "SUBSTITUTE" not in out


def test_an_interrupted_download_resumes_with_a_range_request(tmp_path, tool, hub, tiny_gpt2, capsys):
    server, url = hub
    server.files.update(tiny_gpt2)
    # A whole Pile shard given with --source: the ArXiv documents are kept, the others left out.
    shard = jsonl_zst([{"text": t, "meta": {"pile_set_name": name}}
                       for name in ("Github", "ArXiv", "Pile-CC") for t in texts(name, 40)])
    server.files["/pile/train/00.jsonl.zst"] = shard
    server.cut_once.add("/pile/train/00.jsonl.zst")
    out = run(tool, capsys, "arxiv", "--data-dir", str(tmp_path), "--source", f"arxiv={url}/pile/train/00.jsonl.zst")

    ranges = [r for path, r in server.requests if path == "/pile/train/00.jsonl.zst"]
    assert ranges == [None, f"bytes={len(shard) // 2}-"]
    assert (tmp_path / "arxiv/download/00.jsonl.zst").read_bytes() == shard
    tokenizer = make_tokenizer("GPT2BPETokenizer", str(tmp_path / "gpt2-vocab.json"), str(tmp_path / "gpt2-merges.txt"))
    assert read_back(tmp_path / "arxiv/arxiv_text_document", tokenizer)[0] == texts("ArXiv", 40)
    record = json.loads((tmp_path / "arxiv/SOURCE.json").read_text())
    assert record["files"][0]["sha256"] == hashlib.sha256(shard).hexdigest()
    assert record["files"][0]["checksum"] == "none published: sha256 recorded at download"
    assert "given by --source" in out and "sha256 recorded at download" in out


def test_a_checksum_mismatch_is_one_error_and_leaves_nothing_that_looks_complete(tmp_path, tool, hub, tiny_gpt2):
    server, _ = hub
    server.files.update(tiny_gpt2)
    server.files[GITHUB + "train-00000-of-00001.parquet"] = parquet_bytes([("x = 1\n", "Github")])
    server.wrong_sha256.add(GITHUB + "train-00000-of-00001.parquet")
    with pytest.raises(DataError, match="differs from the expected 0{64}"):
        tool.main(["github", "--data-dir", str(tmp_path), "--no-progress"])
    download = tmp_path / "github/download/data"
    assert sorted(p.name for p in download.iterdir()) == ["train-00000-of-00001.parquet.bad-checksum"]
    assert not list(tmp_path.rglob("*.bin")) and not list(tmp_path.rglob("*.idx"))
    assert not (tmp_path / "github/SOURCE.json").exists()


def test_pinned_gpt2_checksums_reject_other_files(tmp_path, tool, hub):
    server, _ = hub
    for name in ("vocab.json", "merges.txt"):
        server.files[f"/openai-community/gpt2/resolve/{tool.GPT2_REVISION}/{name}"] = b"{}"
    with pytest.raises(DataError, match="196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783"):
        tool.main(["gpt2", "--data-dir", str(tmp_path), "--no-progress"])
    assert not (tmp_path / "gpt2-vocab.json").exists()


def test_the_pinned_gpt2_checksums_are_those_of_gpt2s_files(tmp_path, tool, hub, shared_dir, capsys):
    server, _ = hub
    for remote, pin in tool.SOURCES["gpt2"].pinned.items():
        body = (shared_dir / "data/gpt2" / pin.local).read_bytes()
        assert len(body) == pin.size
        server.files[f"/openai-community/gpt2/resolve/{tool.GPT2_REVISION}/{remote}"] = body
    run(tool, capsys, "gpt2", "--data-dir", str(tmp_path))
    assert (tmp_path / "gpt2-merges.txt").read_bytes() == (shared_dir / "data/gpt2/gpt2-merges.txt").read_bytes()
    # A local folder holding them under the configs' names (the team's ../shared/data/gpt2) is a source too.
    run(tool, capsys, "gpt2", "--data-dir", str(tmp_path / "local"), "--source", f"gpt2={shared_dir / 'data/gpt2'}")
    assert (tmp_path / "local/gpt2-vocab.json").read_bytes() == (shared_dir / "data/gpt2/gpt2-vocab.json").read_bytes()


def test_an_unknown_name_is_one_error_listing_the_names(tool):
    with pytest.raises(DataError, match="unknown dataset 'gitlab'; the datasets are gpt2, github, arxiv, openwebtext2"):
        tool.main(["github", "gitlab"])
    with pytest.raises(DataError, match="unknown dataset 'pile'"):
        tool.main(["github", "--source", "pile=https://example.org/00.jsonl.zst"])


def test_no_name_lists_the_datasets_and_dry_run_fetches_nothing(tmp_path, tool, hub, tiny_gpt2, capsys):
    server, _ = hub
    tool.main([])
    out = capsys.readouterr().out
    assert all(name in out for name in tool.SOURCES) and "29.3 GB" in out and server.requests == []

    server.files.update(tiny_gpt2)
    server.files[GITHUB + "train-00000-of-00001.parquet"] = parquet_bytes([("x = 1\n", "Github")])
    tool.main(["github", "--dry-run", "--data-dir", str(tmp_path)])
    out = capsys.readouterr().out
    assert f"{GITHUB}train-00000-of-00001.parquet" in out and "SUBSTITUTE" in out
    assert all(path.startswith("/api/") for path, _ in server.requests) and not any(tmp_path.iterdir())


def test_the_command_preflight_names_writes_what_the_configs_read(tool):
    """configs/local_setup.yml's paths, as preflight's MAKERS names the command that creates them."""
    from megatron.run.preflight import _maker

    setup = (tool.os.path.join(os.path.dirname(__file__), "..", "..", "configs", "local_setup.yml"))
    text = open(setup).read()
    for path in ("data/github/github_text_document", "data/gpt2-vocab.json", "data/gpt2-merges.txt"):
        assert f'"{path}"' in text
        assert _maker(path) == "python tools/datasets/prepare_data.py github"
    assert tool.output_prefix("data", "github") + "_text_document" == "data/github/github_text_document"
    assert {pin.local for pin in tool.SOURCES["gpt2"].pinned.values()} == {"gpt2-vocab.json", "gpt2-merges.txt"}
    for name in tool.SOURCES:
        if name != "gpt2":
            assert _maker(f"data/{name}/{name}_text_document") == f"python tools/datasets/prepare_data.py {name}"


def test_a_source_that_is_not_there_is_one_error(tmp_path, tool, hub, tiny_gpt2):
    server, _ = hub
    server.files.update(tiny_gpt2)
    server.files[GITHUB + "train-00000-of-00001.parquet"] = parquet_bytes([("x = 1\n", "Github")])
    with pytest.raises(DataError, match="has no such repository, revision or folder"):
        tool.main(["github", "--data-dir", str(tmp_path), "--source", "github=hf://datasets/nobody/nothing@main/x/*"])
    with pytest.raises(DataError, match=r"no file at .* matches 'data/\*\.jsonl\.zst'"):
        other_files = tool.SOURCES["github"].url.replace("*.parquet", "*.jsonl.zst")
        tool.main(["github", "--data-dir", str(tmp_path), "--source", f"github={other_files}"])


def test_a_missing_local_file_is_one_error_at_once(tmp_path, tool):
    with pytest.raises(DataError, match="no such file; check the path"):
        tool.main(["gpt2", "--data-dir", str(tmp_path / "data"), "--source", f"gpt2={tmp_path}", "--no-progress"])


# Issue 35: offline, each attempt spent 80-90 s on retries before its one-line error.
@pytest.mark.parametrize("where, why", [("closed port", "connection refused"),
                                        ("name that does not resolve", "its name does not resolve")])
def test_a_host_that_cannot_be_reached_is_said_at_once_with_the_local_alternatives(where, why, tmp_path, tool,
                                                                                  monkeypatch):
    from tests.support.training import free_port
    host = f"127.0.0.1:{free_port()}" if where == "closed port" else "offline.invalid"  # RFC 2606: never resolves
    monkeypatch.setenv("HF_ENDPOINT", f"http://{host}")
    for argv in (["gpt2", "--source", f"gpt2=http://{host}/gpt2"],  # a download (urllib)
                 ["github", "--dry-run"]):                          # a hub listing (huggingface_hub retries)
        with pytest.raises(DataError) as caught:
            tool.main(argv + ["--data-dir", str(tmp_path / "data"), "--no-progress"])
        message = str(caught.value)
        assert message.startswith(f"cannot reach '{host}' ({why}") and "\n" not in message
        assert "nothing was downloaded, and retrying would not help" in message and "retries" not in message
        assert "`make data` builds the built-in corpus" in message and "--source NAME=PATH" in message
    assert not (tmp_path / "data" / "gpt2-vocab.json.partial").exists()


# ------------------------------------------------ issue 40: downloads stay in their folder, one paragraph
@pytest.mark.parametrize("name, glob, why", [
    ("data/../../../../escaped.parquet", "data/*.parquet", "it climbs out with '..'"),  # * matches / and ..
    ("/tmp/absolute-escape.parquet", "*.parquet", "it is an absolute path"),
])
def test_a_listed_name_outside_the_data_folder_is_refused(name, glob, why, tmp_path, tool, hub, tiny_gpt2):
    server, _ = hub
    server.files.update(tiny_gpt2)
    server.files[GITHUB + "train-00000-of-00001.parquet"] = parquet_bytes([("x = 1\n", "Github")])
    server.listed[name] = parquet_bytes([("planted\n", "Github")])
    data = tmp_path / "a" / "b" / "c" / "data"
    with pytest.raises(DataError, match=re.escape(f"the file name {name!r} does not stay inside ") + ".*" +
                       re.escape(f": {why}. A download is only ever written inside --data-dir")):
        tool.main(["github", "--data-dir", str(data), "--no-progress", "--source",
                   "github=" + tool.SOURCES["github"].url.replace("data/*.parquet", glob)])
    assert not list(tmp_path.rglob("escaped.parquet")) and not os.path.exists("/tmp/absolute-escape.parquet")
    assert not [p for p in server.requests if "escape" in p[0]]  # nothing asked for, nothing written


def test_a_link_in_the_download_folder_is_not_written_through(tmp_path, tool, hub, tiny_gpt2):
    server, _ = hub
    server.files.update(tiny_gpt2)
    server.files[GITHUB + "train-00000-of-00001.parquet"] = parquet_bytes([("x = 1\n", "Github")])
    (tmp_path / "data/github/download").mkdir(parents=True)
    (tmp_path / "outside").mkdir()
    os.symlink(tmp_path / "outside", tmp_path / "data/github/download/data")
    with pytest.raises(DataError, match="a link under the folder leads to"):
        tool.main(["github", "--data-dir", str(tmp_path / "data"), "--no-progress"])
    assert list((tmp_path / "outside").iterdir()) == []


@pytest.mark.parametrize("tail", ["/", "/.."])
def test_a_source_url_with_no_file_name_is_refused(tail, tmp_path, tool, hub, tiny_gpt2):
    server, url = hub
    server.files.update(tiny_gpt2)
    with pytest.raises(DataError, match="it names no file"):
        tool.main(["arxiv", "--data-dir", str(tmp_path), "--source", f"arxiv={url}/pile{tail}", "--no-progress"])


def test_one_data_folder_has_one_writer(tmp_path, tool, hub, tiny_gpt2):
    server, _ = hub
    server.files.update(tiny_gpt2)
    from tools.datasets.download_pile import one_writer
    with one_writer(str(tmp_path)):  # another prepare_data.py holds it
        with pytest.raises(DataError, match=r"is being written by another run \(.*pid \d+"):
            tool.main(["gpt2", "--data-dir", str(tmp_path), "--no-progress"])
    assert server.requests == [] and not list(tmp_path.rglob("*.partial"))


def test_a_bad_content_length_a_file_as_data_dir_and_a_corrupt_parquet_are_one_paragraph(tmp_path, tool, hub,
                                                                                          tiny_gpt2):
    server, url = hub
    server.files.update(tiny_gpt2)
    server.files["/pile/00.jsonl.zst"] = jsonl_zst([{"text": "x"}])
    server.bad_length.add("/pile/00.jsonl.zst")
    with pytest.raises(DataError, match="answered with Content-Length 'abc', which is not a number of bytes"):
        tool.main(["arxiv", "--data-dir", str(tmp_path / "d1"), "--source", f"arxiv={url}/pile/00.jsonl.zst",
                   "--no-progress"])
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(DataError, match=f"cannot write {tmp_path / 'a-file'}.*is a file, not a folder"):
        tool.main(["gpt2", "--data-dir", str(tmp_path / "a-file"), "--no-progress"])
    server.files[GITHUB + "train-00000-of-00001.parquet"] = b"PAR1" + b"\0" * 100 + b"PAR1"
    with pytest.raises(DataError, match="is not a readable parquet file"):
        tool.main(["github", "--data-dir", str(tmp_path / "d2"), "--no-progress", "--workers", "1"])
