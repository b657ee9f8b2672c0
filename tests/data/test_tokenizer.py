"""Tokenizers against independent references: transformers' pure-Python GPT-2 BPE, transformers'
fast-tokenizer wrapper of a tokenizer.json, sentencepiece itself, and Python's own UTF-8 codec."""
import pytest

from megatron.neox_arguments import NeoXArgs
from megatron.tokenizer import (ByteLevelTokenizer, CharLevelTokenizer, TokenizerError, build_tokenizer,
                                make_tokenizer, padded_vocab_size)
from megatron.tokenizer.train_bpe import train_bpe_tokenizer

TEXTS = ["Hello world", "  leading spaces,\ttabs\nand newlines\n\n", "naïve café — ünïcödé 😀 中文",
         "Mr. Speaker, the State of the Union is strong. It's 1790; we'll see.", "a <|endoftext|> b"]


def gpt2_files(shared_dir):
    return str(shared_dir / "data/gpt2/gpt2-vocab.json"), str(shared_dir / "data/gpt2/gpt2-merges.txt")


def tiny_args(**values):
    base = {"num_layers": 1, "hidden_size": 8, "num_attention_heads": 1, "seq_length": 16,
            "train_micro_batch_size_per_gpu": 1}
    return NeoXArgs.from_dict({**base, **values})


def test_gpt2_hello_world_and_vocabulary(shared_dir):
    tokenizer = make_tokenizer("GPT2BPETokenizer", *gpt2_files(shared_dir))
    assert tokenizer.tokenize("Hello world") == [15496, 995]
    assert tokenizer.vocab_size == 50257
    assert tokenizer.eod == 50256
    assert tokenizer.pad not in (tokenizer.eod,) and tokenizer.pad >= tokenizer.vocab_size


def test_gpt2_matches_the_pure_python_reference(shared_dir):
    from transformers import GPT2Tokenizer  # the slow, pure-Python BPE: an independent implementation
    vocab, merges = gpt2_files(shared_dir)
    reference = GPT2Tokenizer(vocab, merges)
    tokenizer = make_tokenizer("GPT2BPETokenizer", vocab, merges)
    for text in TEXTS[:-1]:
        ids = tokenizer.tokenize(text)
        assert ids == reference.encode(text)
        assert tokenizer.detokenize(ids) == text


def test_gpt2_encodes_the_eod_string_as_plain_text(shared_dir):
    tokenizer = make_tokenizer("GPT2BPETokenizer", *gpt2_files(shared_dir))
    assert tokenizer.eod not in tokenizer.tokenize("a <|endoftext|> b")


def test_build_tokenizer_gives_the_padded_vocab_size(shared_dir):
    vocab, merges = gpt2_files(shared_dir)
    args = tiny_args(tokenizer_type="GPT2BPETokenizer", vocab_file=vocab, merge_file=merges)
    # 50257 (+ pad id 50257) rounded up to a multiple of 128
    assert build_tokenizer(args.tokenizer_run()).padded_vocab_size == 50304
    args = tiny_args(tokenizer_type="ByteLevelTokenizer", make_vocab_size_divisible_by=64)
    assert build_tokenizer(args.tokenizer_run()).padded_vocab_size == 320


def test_byte_level_is_utf8_with_special_ids_outside_the_bytes():
    tokenizer = ByteLevelTokenizer()
    for text in TEXTS:
        assert tokenizer.tokenize(text) == list(text.encode("utf-8"))
        assert tokenizer.detokenize(tokenizer.tokenize(text)) == text
    assert {tokenizer.eod, tokenizer.pad}.isdisjoint(range(256)) and tokenizer.eod != tokenizer.pad
    assert tokenizer.detokenize(tokenizer.tokenize("ab") + [tokenizer.eod]) == "ab"


def test_char_level_round_trips_latin_text_and_marks_the_rest_unknown():
    tokenizer = CharLevelTokenizer()
    text = "naïve café, Œuvre"
    assert tokenizer.tokenize(text) == [ord(c) for c in text]
    assert tokenizer.detokenize(tokenizer.tokenize(text)) == text
    assert tokenizer.tokenize("中") == [tokenizer.unk]
    specials = {tokenizer.eod, tokenizer.pad, tokenizer.unk}
    assert len(specials) == 3 and min(specials) >= 512 and max(specials) < tokenizer.vocab_size


def test_trained_bpe_loads_as_hf_tokenizer_and_matches_transformers(tmp_path):
    from transformers import PreTrainedTokenizerFast
    corpus = [open(__file__, encoding="utf-8").read()] * 3 + TEXTS
    path = tmp_path / "tokenizer.json"
    tokenizer = train_bpe_tokenizer(corpus, 400, str(path), show_progress=False)
    assert tokenizer.vocab_size == 400
    args = tiny_args(tokenizer_type="HFTokenizer", vocab_file=str(path))
    tokenizer = build_tokenizer(args.tokenizer_run())
    assert tokenizer.padded_vocab_size == 512
    reference = PreTrainedTokenizerFast(tokenizer_file=str(path))
    assert tokenizer.eod == reference.convert_tokens_to_ids("<|endoftext|>")
    assert tokenizer.pad == reference.convert_tokens_to_ids("<|padding|>") != tokenizer.eod
    for text in TEXTS[:-1]:
        assert tokenizer.tokenize(text) == reference.encode(text)
        assert tokenizer.detokenize(tokenizer.tokenize(text)) == text
    assert len(tokenizer.tokenize("def tiny_args(**values):")) < len("def tiny_args(**values):")


def test_sentencepiece_model(tmp_path):
    import sentencepiece
    text_file = tmp_path / "corpus.txt"
    text_file.write_text("\n".join(open(__file__, encoding="utf-8").read().splitlines() * 2), encoding="utf-8")
    prefix = tmp_path / "spm"
    sentencepiece.SentencePieceTrainer.train(input=str(text_file), model_prefix=str(prefix), vocab_size=300,
                                             minloglevel=2)
    tokenizer = make_tokenizer("SPMTokenizer", str(prefix) + ".model")
    reference = sentencepiece.SentencePieceProcessor(model_file=str(prefix) + ".model")
    text = "the tokenizer matches sentencepiece"
    assert tokenizer.tokenize(text) == reference.encode(text)
    assert tokenizer.detokenize(tokenizer.tokenize(text)) == text
    assert tokenizer.eod == reference.eos_id() >= 0
    assert tokenizer.pad not in (tokenizer.eod, *tokenizer.tokenize(text))

    sentencepiece.SentencePieceTrainer.train(input=str(text_file), model_prefix=str(tmp_path / "noeos"),
                                             vocab_size=300, eos_id=-1, minloglevel=2)
    with pytest.raises(TokenizerError, match="no end-of-sentence piece"):
        make_tokenizer("SPMTokenizer", str(tmp_path / "noeos.model"))


def test_padded_vocab_size_covers_every_id():
    for tokenizer in (ByteLevelTokenizer(), CharLevelTokenizer()):
        for divisor in (1, 7, 128):
            size = padded_vocab_size(tokenizer, divisor)
            assert size % divisor == 0 and size > max(tokenizer.eod, tokenizer.pad) and size - divisor < max(
                tokenizer.vocab_size, tokenizer.pad + 1)


def test_clear_errors_for_missing_or_wrong_files(tmp_path, shared_dir):
    with pytest.raises(TokenizerError, match="needs `vocab-file`"):
        make_tokenizer("GPT2BPETokenizer")
    with pytest.raises(TokenizerError, match="does not exist"):
        make_tokenizer("GPT2BPETokenizer", str(tmp_path / "nope.json"), str(tmp_path / "nope.txt"))
    vocab, merges = gpt2_files(shared_dir)
    with pytest.raises(TokenizerError, match="not GPT-2's vocab.json"):
        make_tokenizer("GPT2BPETokenizer", merges, merges)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="not a Hugging Face tokenizer.json"):
        make_tokenizer("HFTokenizer", str(tmp_path / "bad.json"))
    with pytest.raises(TokenizerError, match="unknown tokenizer-type"):
        make_tokenizer("WordPiece")
