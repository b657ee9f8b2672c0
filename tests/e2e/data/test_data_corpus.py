"""The built-in stdlib corpus: one command from the interpreter's library to training datasets."""
import importlib.util
import json
import subprocess
import sys

from megatron.data import build_evaluation_stream, build_train_valid_test_datasets
from megatron.data.documents import read_documents, zstd_lines
from megatron.data.stdlib_corpus import stdlib_python_files
from megatron.neox_arguments import NeoXArgs
from tests.support.data import data_of

MAX_BYTES = "300000"


def load_tool(repo_root):
    spec = importlib.util.spec_from_file_location("build_default_corpus",
                                                  repo_root / "tools/datasets/build_default_corpus.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
def test_one_command_builds_a_deterministic_corpus_that_trains(tmp_path, repo_root):
    first = tmp_path / "first"
    result = subprocess.run([sys.executable, str(repo_root / "tools/datasets/build_default_corpus.py"),
                             "--output-dir", str(first), "--max-bytes", MAX_BYTES, "--no-progress"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert f"data-path: {first}/stdlib_text_document" in result.stdout
    load_tool(repo_root).main(["--output-dir", str(tmp_path / "second"), "--max-bytes", MAX_BYTES, "--no-progress"])
    for name in ("stdlib.jsonl.zst", "stdlib_text_document.bin", "stdlib_text_document.idx"):
        assert (first / name).read_bytes() == (tmp_path / "second" / name).read_bytes()

    texts = [texts[0] for _, _, texts in read_documents([str(first / "stdlib.jsonl.zst")])]
    assert 0 < sum(len(t.encode()) for t in texts) <= int(MAX_BYTES)
    with open(first / "stdlib.jsonl.zst", "rb") as fh:
        first_line = json.loads(next(zstd_lines(fh)))
    assert first_line["meta"] == {"source": "cpython-stdlib", "path": stdlib_python_files()[0]}

    args = NeoXArgs.from_ymls([str(repo_root / "configs/tiny.yml")],
                              overrides={"data_path": str(first / "stdlib_text_document"), "train_iters": 5, "split": "8,1,1",
                                         "data_cache_path": str(tmp_path / "cache")})
    data, tokenizer = data_of(args)
    train, valid, test = build_train_valid_test_datasets(data, tokenizer)
    assert train[0]["tokens"].shape == (args.seq_length,)
    stream = build_evaluation_stream(data, "train", tokenizer)  # the first 80% of the (non-empty) files, in order
    documents_in_stream = int((stream == 256).sum())
    assert bytes(t for t in stream.tolist() if t < 256).decode() == "".join([t for t in texts if t][:documents_in_stream])
