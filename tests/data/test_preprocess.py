"""Preprocessing: real corpora into files megatron-core reads; worker-count invariance; bad input (the tool on
GPT-2's tokenizer: tests/e2e/data/test_preprocess.py)."""
import importlib.util
import json
import os

import numpy as np
import pytest
import zstandard
from megatron.core.datasets.indexed_dataset import IndexedDataset

from megatron.data import DataError
from megatron.data.preprocess import preprocess
from megatron.data.stdlib_corpus import read_source, stdlib_python_files, stdlib_root
from megatron.neox_arguments import run_cli
from megatron.tokenizer import ByteLevelTokenizer, make_tokenizer
from tests.support.data import first_lines_of, write_zst


def jsonl(texts) -> bytes:
    return b"".join(json.dumps({"text": t}).encode() + b"\n" for t in texts)


def outputs_in(directory):
    return sorted(p.name for p in directory.iterdir() if p.suffix in (".bin", ".idx", ".partial"))


def small_python_corpus(tmp_path, count=150):
    root = stdlib_root()
    texts = [read_source(os.path.join(root, p)) for p in stdlib_python_files()[:count]]
    return write_zst(tmp_path / "code.jsonl.zst", jsonl(texts)), texts


def test_output_is_identical_for_any_worker_count(tmp_path):
    corpus, texts = small_python_corpus(tmp_path)
    files = {}
    for workers in (1, 2, 3):
        prefix = tmp_path / f"w{workers}"
        summary = preprocess([str(corpus)], str(prefix), ByteLevelTokenizer(), append_eod=True,
                             workers=workers, show_progress=False)
        files[workers] = [(tmp_path / f"w{workers}_text_document{ext}").read_bytes() for ext in (".bin", ".idx")]
    assert files[1] == files[2] == files[3]
    nonempty = [t for t in texts if t]
    assert summary.documents == len(texts) and summary.empty_documents == len(texts) - len(nonempty)
    dataset = IndexedDataset(str(tmp_path / "w1_text_document"))
    assert [d.tolist() for d in dataset[0:len(dataset)]] == [list(t.encode()) + [256] for t in nonempty]


def test_several_jsonl_keys_give_one_dataset_each(tmp_path):
    lines = b"".join(json.dumps({"text": f"doc {i}", "title": f"t{i}"}).encode() + b"\n" for i in range(5))
    (tmp_path / "in.jsonl").write_bytes(lines)
    preprocess([str(tmp_path / "in.jsonl")], str(tmp_path / "out"), ByteLevelTokenizer(),
               jsonl_keys=["text", "title"], show_progress=False)
    # (keep each IndexedDataset alive while reading: its __del__ unmaps the arrays it returned)
    titles, texts = (IndexedDataset(str(tmp_path / f"out_{key}_document")) for key in ("title", "text"))
    assert titles[4].tolist() == list(b"t4") and texts[4].tolist() == list(b"doc 4")


GOOD = [f"document number {i}" for i in range(60)]


def bad_inputs(tmp_path):
    """name -> (file, expected message pieces, documents kept when skipping)."""
    lines = jsonl(GOOD).split(b"\n")
    lines.insert(50, json.dumps({"content": "no text key"}).encode())
    (tmp_path / "missing_key.jsonl").write_bytes(b"\n".join(lines))
    lines[50] = b'{"text": "caf\xe9"}'
    (tmp_path / "bad_utf8.jsonl").write_bytes(b"\n".join(lines))
    lines[50] = b'{"text": "unterminated'
    (tmp_path / "bad_json.jsonl").write_bytes(b"\n".join(lines))
    frame = zstandard.ZstdCompressor().compress(jsonl(GOOD))
    (tmp_path / "truncated.jsonl.zst").write_bytes(frame * 3 + frame[: len(frame) // 2])  # cut in frame 4
    (tmp_path / "garbage.jsonl.zst").write_bytes(b"this is not zstd" + frame)
    (tmp_path / "empty.jsonl").write_bytes(b"")
    return {
        "missing_key": ("missing_key.jsonl", ["line 51", "missing key", "'text'", "content"], 60),
        "bad_utf8": ("bad_utf8.jsonl", ["line 51", "invalid UTF-8"], 60),
        "bad_json": ("bad_json.jsonl", ["line 51", "invalid JSON"], 60),
        "truncated": ("truncated.jsonl.zst", ["line 181", "corrupt zstd data", "truncated"], 180),
        "garbage": ("garbage.jsonl.zst", ["line 1", "corrupt zstd data"], 0),
        "empty": ("empty.jsonl", ["whole file", "empty file"], 0),
    }


@pytest.mark.parametrize("case", ["missing_key", "bad_utf8", "bad_json", "truncated", "garbage", "empty"])
def test_bad_input_stops_with_file_and_line_and_writes_nothing(tmp_path, case):
    name, pieces, _ = bad_inputs(tmp_path)[case]
    (tmp_path / "good.jsonl").write_bytes(jsonl(GOOD))
    inputs = [str(tmp_path / "good.jsonl"), str(tmp_path / name)]
    with pytest.raises(DataError) as error:
        preprocess(inputs, str(tmp_path / "out"), ByteLevelTokenizer(), append_eod=True, workers=2,
                   show_progress=False)
    message = str(error.value)
    assert str(tmp_path / name) in message and "--skip-bad-input" in message
    for piece in pieces:
        assert piece in message
    assert outputs_in(tmp_path) == []


@pytest.mark.parametrize("case", ["missing_key", "bad_utf8", "bad_json", "truncated", "garbage", "empty"])
def test_bad_input_is_skipped_and_counted_on_request(tmp_path, case):
    name, _, kept = bad_inputs(tmp_path)[case]
    if kept == 0:  # nothing readable is left: still an error, and still no output
        with pytest.raises(DataError, match="no documents were read"):
            preprocess([str(tmp_path / name)], str(tmp_path / "out"), ByteLevelTokenizer(),
                       skip_bad_input=True, show_progress=False)
        assert outputs_in(tmp_path) == []
        return
    summary = preprocess([str(tmp_path / name)], str(tmp_path / "out"), ByteLevelTokenizer(), append_eod=True,
                         skip_bad_input=True, show_progress=False)
    assert sum(summary.skipped.values()) == 1 and summary.skipped_examples
    dataset = IndexedDataset(str(tmp_path / "out_text_document"))
    assert summary.documents == kept == len(dataset)
    assert [d.tolist() for d in dataset[0:3]] == [list(t.encode()) + [256] for t in GOOD[:3]]


def test_a_failed_run_leaves_an_earlier_dataset_untouched(tmp_path):
    (tmp_path / "good.jsonl").write_bytes(jsonl(GOOD))
    preprocess([str(tmp_path / "good.jsonl")], str(tmp_path / "out"), ByteLevelTokenizer(), show_progress=False)
    before = (tmp_path / "out_text_document.bin").read_bytes()
    bad_inputs(tmp_path)
    with pytest.raises(DataError):
        preprocess([str(tmp_path / "missing_key.jsonl")], str(tmp_path / "out"), ByteLevelTokenizer(),
                   show_progress=False)
    assert (tmp_path / "out_text_document.bin").read_bytes() == before
    assert outputs_in(tmp_path) == ["out_text_document.bin", "out_text_document.idx"]


def test_cli_prints_the_error_without_a_traceback(tmp_path, repo_root, capsys):
    bad_inputs(tmp_path)
    spec = importlib.util.spec_from_file_location("preprocess_data", repo_root / "tools/datasets/preprocess_data.py")
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    argv = ["--input", str(tmp_path / "bad_json.jsonl"), "--output-prefix", str(tmp_path / "out"),
            "--tokenizer-type", "ByteLevelTokenizer", "--no-progress"]
    with pytest.raises(SystemExit) as exit_status:
        run_cli(lambda: tool.main(argv))  # what `python tools/datasets/preprocess_data.py ...` runs
    assert exit_status.value.code != 0
    stderr = capsys.readouterr().err
    assert "Traceback" not in stderr and "bad_json.jsonl, line 51: invalid JSON" in stderr


def test_inputs_from_directories_and_globs_in_sorted_order(tmp_path):
    (tmp_path / "in").mkdir()
    for name, text in (("b.jsonl", "second"), ("a.txt", "first"), ("c.jsonl", "third")):
        path = tmp_path / "in" / name
        path.write_bytes(jsonl([text]) if name.endswith(".jsonl") else text.encode())
    for inputs in ([str(tmp_path / "in")], [str(tmp_path / "in" / "*")]):
        preprocess(inputs, str(tmp_path / "out"), ByteLevelTokenizer(), show_progress=False)
        dataset = IndexedDataset(str(tmp_path / "out_text_document"))
        assert [bytes(d.tolist()) for d in dataset[0:3]] == [b"first", b"second", b"third"]
    with pytest.raises(DataError, match="matches no file"):
        preprocess([str(tmp_path / "nothing*.jsonl")], str(tmp_path / "out"), ByteLevelTokenizer())
    with pytest.raises(DataError, match="does not exist"):
        preprocess([str(tmp_path / "missing.jsonl")], str(tmp_path / "out"), ByteLevelTokenizer())


@pytest.mark.slow
@pytest.mark.parametrize("corpus", ["prose", "latex"])
def test_whole_shared_corpus_with_gpt2(tmp_path, shared_dir, corpus):
    from transformers import GPT2TokenizerFast
    vocab, merges = str(shared_dir / "data/gpt2/gpt2-vocab.json"), str(shared_dir / "data/gpt2/gpt2-merges.txt")
    source = shared_dir / f"data/corpora/{corpus}.jsonl.zst"
    summary = preprocess([str(source)], str(tmp_path / corpus), make_tokenizer("GPT2BPETokenizer", vocab, merges),
                         append_eod=True, workers=2, show_progress=False)
    texts = [json.loads(line)["text"] for line in first_lines_of(source, 10**6)]
    assert summary.skipped == {} and summary.documents == len(texts)
    nonempty = [t for t in texts if t]
    dataset = IndexedDataset(str(tmp_path / f"{corpus}_text_document"))
    assert len(dataset) == len(nonempty) and int(dataset.sequence_lengths.sum()) == summary.tokens
    reference = GPT2TokenizerFast(vocab, merges)
    for i in np.random.default_rng(0).choice(len(nonempty), 20, replace=False):
        assert dataset[int(i)].tolist() == reference.encode(nonempty[i]) + [50256]
