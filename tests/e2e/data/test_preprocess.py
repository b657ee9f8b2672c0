"""tools/datasets/preprocess_data.py on a slice of the prose corpus with GPT-2's tokenizer and two workers: the
files it writes read back through megatron-core as transformers' tokenizer encodes the text (preprocessing
in-process: tests/data/test_preprocess.py)."""
import json
import subprocess
import sys

import numpy as np
from megatron.core.datasets.indexed_dataset import IndexedDataset

from tests.support.data import first_lines_of, write_zst


def test_prose_with_gpt2_reads_back_through_megatron_core(tmp_path, shared_dir, repo_root):
    from transformers import GPT2TokenizerFast
    subset = write_zst(tmp_path / "prose.jsonl.zst",
                       b"".join(first_lines_of(shared_dir / "data/corpora/prose.jsonl.zst", 24)))
    vocab, merges = shared_dir / "data/gpt2/gpt2-vocab.json", shared_dir / "data/gpt2/gpt2-merges.txt"
    result = subprocess.run(
        [sys.executable, str(repo_root / "tools/datasets/preprocess_data.py"), "--input", str(subset),
         "--output-prefix", str(tmp_path / "prose"), "--tokenizer-type", "GPT2BPETokenizer",
         "--vocab-file", str(vocab), "--merge-file", str(merges), "--append-eod", "--workers", "2",
         "--no-progress"], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "documents 24" in result.stdout and "tokens/s" in result.stdout

    dataset = IndexedDataset(str(tmp_path / "prose_text_document"))
    assert len(dataset) == 24 and dataset.index.dtype == np.uint16
    reference = GPT2TokenizerFast(str(vocab), str(merges))
    texts = [json.loads(line)["text"] for line in first_lines_of(subset, 24)]
    for i in (0, 23):
        assert dataset[i].tolist() == reference.encode(texts[i]) + [50256]
