"""Hostile inputs, round 2 (issue 24), row 9: a tokenizer that would silently drop characters is refused
by preprocessing before any token is written."""
import json
import subprocess
import sys

import pytest
from tokenizers import Tokenizer as HFBackend, decoders, models, pre_tokenizers

from megatron.data import DataError
from megatron.data.preprocess import preprocess
from megatron.tokenizer import make_tokenizer
from megatron.tokenizer.tokenizer import BYTE_SYMBOLS, describe_bytes
from tests.support.training import REPO_ROOT, child_environment

TEXT = "def decode(data):\n    return data.decode('utf-8')  # héllo ✓\n" * 20


@pytest.fixture
def gpt2_without_bytes(tmp_path):
    """A GPT-2 vocab.json with `<|endoftext|>` but the symbols of two bytes only ('d', 'e')."""
    vocab, merges = tmp_path / "vocab.json", tmp_path / "merges.txt"
    vocab.write_text(json.dumps({"d": 0, "e": 1, "<|endoftext|>": 2}))
    merges.write_text("#version: 0.2\n")
    return str(vocab), str(merges)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": TEXT}) + "\n" for _ in range(5)))
    return str(path)


def test_byte_symbols_are_the_byte_level_alphabet():
    assert len(set(BYTE_SYMBOLS)) == 256 and set(BYTE_SYMBOLS) == set(pre_tokenizers.ByteLevel.alphabet())


def test_a_vocabulary_missing_bytes_is_refused_before_writing(gpt2_without_bytes, corpus, tmp_path):
    tokenizer = make_tokenizer("GPT2BPETokenizer", *gpt2_without_bytes)
    assert tokenizer.tokenize("dead beef") == [0, 1, 0, 1, 1]  # what was written before: all but d/e gone
    with pytest.raises(DataError) as caught:
        preprocess([corpus], str(tmp_path / "out"), tokenizer, append_eod=True, show_progress=False)
    assert str(caught.value) == (
        f"the GPT2BPETokenizer of {gpt2_without_bytes[0]} cannot encode 254 of the 256 byte values: its "
        "vocabulary has no token for 0x00-0x63 'c', 0x66 'f'-0xff (it has tokens for 0x64 'd'-0x65 'e' only), and "
        "no unknown token, so every character made of them would be dropped from the data without a trace. Give "
        "the tokenizer's complete vocabulary file (GPT-2's vocab.json has a token for each of the 256 bytes); "
        "nothing was written.")
    assert not list(tmp_path.glob("out*"))


def test_a_hugging_face_byte_level_tokenizer_missing_one_byte_is_named(corpus, tmp_path):
    vocab = {symbol: i for i, symbol in enumerate(BYTE_SYMBOLS) if symbol != BYTE_SYMBOLS[0xa9]}  # the 2nd byte of é
    vocab["<|endoftext|>"] = 256
    backend = HFBackend(models.BPE(vocab, []))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    backend.save(str(tmp_path / "tokenizer.json"))
    tokenizer = make_tokenizer("HFTokenizer", str(tmp_path / "tokenizer.json"))
    assert tokenizer.lost_bytes() == [0xa9]
    with pytest.raises(DataError, match=r"cannot encode 1 of the 256 byte values: its vocabulary has no token for "
                                        r"0xa9, and no unknown token"):
        preprocess([corpus], str(tmp_path / "out"), tokenizer, show_progress=False)


def test_complete_tokenizers_lose_nothing(shared_dir):
    assert make_tokenizer("ByteLevelTokenizer").lost_bytes() == []
    assert make_tokenizer("CharLevelTokenizer").lost_bytes() == []
    gpt2 = shared_dir / "data" / "gpt2"
    assert make_tokenizer("GPT2BPETokenizer", str(gpt2 / "gpt2-vocab.json"), str(gpt2 / "gpt2-merges.txt")) \
        .lost_bytes() == []


def test_describe_bytes():
    assert describe_bytes([0x41]) == "0x41 'A'"
    assert describe_bytes([0, 1, 2, 0x20, 0x7f, 0x80]) == "0x00-0x02, 0x20, 0x7f-0x80"


@pytest.mark.launches
def test_preprocess_data_refuses_in_one_paragraph(gpt2_without_bytes, corpus, tmp_path):
    done = subprocess.run(
        [sys.executable, "tools/datasets/preprocess_data.py", "--input", corpus, "--output-prefix",
         str(tmp_path / "out"), "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", gpt2_without_bytes[0],
         "--merge-file", gpt2_without_bytes[1], "--append-eod", "--no-progress"],
        cwd=REPO_ROOT, env=child_environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "cannot encode 254 of the 256 byte values" in errors[0], done.stderr
    assert not list(tmp_path.glob("out*"))
