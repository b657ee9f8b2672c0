"""Tokenizer files that `AutoTokenizer.from_pretrained(folder)` loads and that encode exactly as this
project's tokenizer (megatron/tokenizer), for every `tokenizer-type`:

- GPT2BPETokenizer, HFTokenizer: the same `tokenizers` pipeline, as a fast tokenizer;
- ByteLevelTokenizer: a `tokenizers` BPE with no merges over GPT-2's byte-to-character alphabet, so
  every UTF-8 byte is one token whose id is the byte; EOD 256 and pad 257 as special tokens;
- CharLevelTokenizer: a word-level model over single characters (code points < 512), any other
  character -> the unknown token U+FFFD (id 514, decoded as U+FFFD like this project);
- SPMTokenizer: the SentencePiece model itself behind a small tokenizer class shipped in the folder
  (tokenization_neox_spm.py, trust_remote_code), so encoding is SentencePiece's own.

Where this project encodes the text "<|endoftext|>" as ordinary text (every type but HFTokenizer),
the export sets `split_special_tokens` so it does too."""
import json
import pathlib
import shutil

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

from .tokenizer import (ByteLevelTokenizer, CharLevelTokenizer, GPT2BPETokenizer, HFTokenizer,
                        SPMTokenizer)

EOD_TEXT, PAD_TEXT = "<|endoftext|>", "<|padding|>"
# The class the SentencePiece folder loads with trust_remote_code: a template of the Hugging Face export.
SPM_TEMPLATE = (pathlib.Path(__file__).parents[2] / "tools" / "ckpts" / "hf_export" / "templates"
                / "tokenization_neox_spm.py")


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's map of the 256 bytes to printable characters (what the ByteLevel pre-tokenizer emits)."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


def byte_level_backend() -> Tokenizer:
    vocab = {char: byte for byte, char in bytes_to_unicode().items()}
    vocab.update({EOD_TEXT: ByteLevelTokenizer.eod, PAD_TEXT: ByteLevelTokenizer.pad})
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    return backend


def char_level_backend() -> Tokenizer:
    vocab = {chr(i): i for i in range(CharLevelTokenizer.num_chars)}
    vocab.update({EOD_TEXT: CharLevelTokenizer.eod, PAD_TEXT: CharLevelTokenizer.pad, "\ufffd": CharLevelTokenizer.unk})
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token="\ufffd"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return backend


def _fast(backend, tokenizer, *, eos: str, pad: str | None, split_special_tokens: bool):
    special = {"eos_token": eos, "bos_token": eos, "unk_token": None}
    if pad is not None:
        special["pad_token"] = pad
    return PreTrainedTokenizerFast(tokenizer_object=backend, split_special_tokens=split_special_tokens,
                                   clean_up_tokenization_spaces=False, **special)


def export_tokenizer(tokenizer, out_dir: pathlib.Path):
    """Write the tokenizer files into `out_dir`; returns the Hugging Face tokenizer written."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    if isinstance(tokenizer, SPMTokenizer):
        return _export_spm(tokenizer, out_dir)
    if isinstance(tokenizer, ByteLevelTokenizer):
        hf = _fast(byte_level_backend(), tokenizer, eos=EOD_TEXT, pad=PAD_TEXT, split_special_tokens=True)
    elif isinstance(tokenizer, CharLevelTokenizer):
        hf = _fast(char_level_backend(), tokenizer, eos=EOD_TEXT, pad=PAD_TEXT, split_special_tokens=True)
    elif isinstance(tokenizer, GPT2BPETokenizer):
        backend = Tokenizer.from_str(tokenizer.backend.to_str())
        hf = _fast(backend, tokenizer, eos=backend.id_to_token(tokenizer.eod), pad=None, split_special_tokens=True)
    elif isinstance(tokenizer, HFTokenizer):
        backend = Tokenizer.from_str(tokenizer.backend.to_str())
        pad = backend.id_to_token(tokenizer.pad) if tokenizer.pad < tokenizer.vocab_size else None
        hf = _fast(backend, tokenizer, eos=backend.id_to_token(tokenizer.eod), pad=pad, split_special_tokens=False)
    else:
        raise TypeError(f"no Hugging Face export for tokenizer {type(tokenizer).__name__}")
    hf.model_max_length = int(1e30)  # relative methods have no length limit; `learned` says so itself
    hf.save_pretrained(str(out_dir))
    return hf


def _export_spm(tokenizer, out_dir: pathlib.Path):
    shutil.copyfile(SPM_TEMPLATE, out_dir / SPM_TEMPLATE.name)
    (out_dir / "spm.model").write_bytes(tokenizer.backend.serialized_model_proto())
    eos = tokenizer.backend.id_to_piece(tokenizer.eod)
    config = {"tokenizer_class": "NeoXSentencePieceTokenizer",
              "auto_map": {"AutoTokenizer": ["tokenization_neox_spm.NeoXSentencePieceTokenizer", None]},
              "eos_token": eos, "bos_token": eos, "model_max_length": int(1e30)}
    if tokenizer.pad < tokenizer.vocab_size:
        config["pad_token"] = tokenizer.backend.id_to_piece(tokenizer.pad)
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n")
    return None
