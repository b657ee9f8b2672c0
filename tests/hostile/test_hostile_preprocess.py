"""Hostile inputs, round 2 (issue 24), row 9: a tokenizer that would silently drop characters is refused
by preprocessing before any token is written (tools/datasets/preprocess_data.py's refusal:
tests/e2e/hostile/test_hostile_preprocess.py)."""
import pytest
from tokenizers import Tokenizer as HFBackend, decoders, models, pre_tokenizers

from megatron.data import DataError
from megatron.data.preprocess import preprocess
from megatron.tokenizer import make_tokenizer
from megatron.tokenizer.tokenizer import BYTE_SYMBOLS, describe_bytes
from tests.support.hostile import corpus, gpt2_without_bytes  # noqa: F401 (fixtures)

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
