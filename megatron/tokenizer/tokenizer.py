"""The tokenizers a NeoX config can name (`tokenizer-type`), all with one small interface.

Every tokenizer has `tokenize(text) -> list[int]`, `detokenize(ids) -> str`, `eod` (the
end-of-document id appended after each document), `pad` (an id no text ever maps to; samples padded
with it are masked out of the loss) and `vocab_size` (the ids its files define). The model's
embedding is `padded_vocab_size(tokenizer, divisor)` rows, which also covers `pad`; the tokenizer
`build_tokenizer(run)` returns (`run`: run_keys.py's TokenizerRun) carries that number as its `padded_vocab_size`.
BPE and SentencePiece come from the Hugging Face `tokenizers` and `sentencepiece` libraries.
"""
import os

from megatron.errors import NeoXArgsError

from .run_keys import TokenizerRun


class TokenizerError(NeoXArgsError):
    """A tokenizer that cannot be built from the given type and files."""


class Tokenizer:
    name: str
    vocab_size: int
    eod: int
    pad: int
    padded_vocab_size: int | None = None  # the model's embedding rows, when built from a config

    def tokenize(self, text: str) -> list:
        raise NotImplementedError

    def detokenize(self, ids) -> str:
        raise NotImplementedError

    def lost_bytes(self) -> list[int]:
        """The byte values this tokenizer drops from text without a trace (no id, not even an unknown
        token's). None for these files' own tokenizers: bytes and characters all have ids, and an unknown
        character becomes the unknown id, which says so."""
        return []

    @property
    def unique_identifiers(self) -> dict:
        # megatron-core hashes this into the names of its cached sample indices.
        return {"class": self.name, "vocab_size": self.vocab_size, "eod": self.eod, "pad": self.pad}


class _TokenizersBackend(Tokenizer):
    """A tokenizer whose `backend` is a Hugging Face `tokenizers.Tokenizer` read from `vocab_file`."""
    vocab_file: str

    def tokenize(self, text):
        return self.backend.encode(text).ids

    def detokenize(self, ids):
        return self.backend.decode(list(ids), skip_special_tokens=False)

    def lost_bytes(self):
        """A byte-level BPE (GPT-2's pre-tokenizer) turns each byte into its symbol; a byte whose symbol is
        not in the vocabulary, with no unknown token to stand for it, vanishes from every text."""
        from tokenizers import pre_tokenizers
        if not isinstance(self.backend.pre_tokenizer, pre_tokenizers.ByteLevel) \
                or getattr(self.backend.model, "unk_token", None):
            return []
        vocab = self.backend.get_vocab()
        return [byte for byte, symbol in enumerate(BYTE_SYMBOLS) if symbol not in vocab]


class GPT2BPETokenizer(_TokenizersBackend):
    """GPT-2's byte-level BPE from its vocab.json + merges.txt. `<|endoftext|>` is the EOD id; text
    that happens to contain the string "<|endoftext|>" is encoded as ordinary text, never as EOD."""
    name = "GPT2BPETokenizer"

    def __init__(self, vocab_file: str, merge_file: str):
        from tokenizers import Tokenizer as HFBackend, decoders, models, pre_tokenizers
        try:
            self.backend = HFBackend(models.BPE.from_file(vocab_file, merge_file))
        except Exception as err:  # the library raises a bare Exception on malformed files
            raise TokenizerError(f"vocab-file {vocab_file} / merge-file {merge_file} are not GPT-2's "
                                 f"vocab.json and merges.txt ({err}).") from err
        self.backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        self.backend.decoder = decoders.ByteLevel()
        self.vocab_file = vocab_file
        self.vocab_size = self.backend.get_vocab_size()
        self.eod = _require_token(self.backend, ["<|endoftext|>"], vocab_file)
        self.pad = self.vocab_size

class HFTokenizer(_TokenizersBackend):
    """Any Hugging Face `tokenizer.json` (e.g. one trained by tools/train_tokenizer.py)."""
    name = "HFTokenizer"
    EOD_TOKENS = ["<|endoftext|>", "</s>", "<eos>", "<|eos|>", "[EOS]"]
    PAD_TOKENS = ["<|padding|>", "<pad>", "[PAD]"]

    def __init__(self, tokenizer_file: str):
        from tokenizers import Tokenizer as HFBackend
        try:
            self.backend = HFBackend.from_file(tokenizer_file)
        except Exception as err:  # the library raises a bare Exception on malformed JSON
            raise TokenizerError(f"vocab-file {tokenizer_file} is not a Hugging Face tokenizer.json "
                                 f"({err}). Give the tokenizer.json of a `tokenizers` tokenizer.") from err
        self.vocab_file = tokenizer_file
        self.vocab_size = self.backend.get_vocab_size(with_added_tokens=True)
        self.eod = _require_token(self.backend, self.EOD_TOKENS, tokenizer_file)
        pads = [self.backend.token_to_id(t) for t in self.PAD_TOKENS if self.backend.token_to_id(t) is not None]
        self.pad = pads[0] if pads else self.vocab_size

class SPMTokenizer(Tokenizer):
    """A SentencePiece `.model`; its end-of-sentence piece is the EOD id."""
    name = "SPMTokenizer"

    def __init__(self, model_file: str):
        import sentencepiece
        try:
            self.backend = sentencepiece.SentencePieceProcessor(model_file=model_file)
        except (OSError, RuntimeError) as err:
            raise TokenizerError(f"vocab-file {model_file} is not a SentencePiece model ({err}).") from err
        self.vocab_size = self.backend.get_piece_size()
        self.eod = self.backend.eos_id()
        if self.eod < 0:
            raise TokenizerError(f"SentencePiece model {model_file} has no end-of-sentence piece "
                                 "(eos_id = -1); retrain it with --eos_id set, it is the document separator.")
        self.pad = self.backend.pad_id() if self.backend.pad_id() >= 0 else self.vocab_size

    def tokenize(self, text):
        return self.backend.encode(text)

    def detokenize(self, ids):
        return self.backend.decode([int(i) for i in ids])


class ByteLevelTokenizer(Tokenizer):
    """The UTF-8 bytes of the text (ids 0-255); EOD = 256 and pad = 257 collide with no byte. Needs no files."""
    name = "ByteLevelTokenizer"
    vocab_size, eod, pad = 258, 256, 257

    def tokenize(self, text):
        return list(text.encode("utf-8"))

    def detokenize(self, ids):
        return bytes(int(i) for i in ids if int(i) < 256).decode("utf-8", errors="replace")


class CharLevelTokenizer(Tokenizer):
    """One id per Unicode code point below 512 (ASCII, Latin-1, Latin Extended); any other character
    becomes `unk` (decoded as U+FFFD). EOD, pad and unk come after the characters. Needs no files."""
    name = "CharLevelTokenizer"
    num_chars = 512
    eod, pad, unk = num_chars, num_chars + 1, num_chars + 2
    vocab_size = num_chars + 3

    def tokenize(self, text):
        return [c if c < self.num_chars else self.unk for c in map(ord, text)]

    def detokenize(self, ids):
        return "".join(chr(i) if i < self.num_chars else "\ufffd" for i in map(int, ids) if i != self.eod)


def _byte_symbols() -> list[str]:
    """GPT-2's printable stand-in for each byte 0..255 (its `bytes_to_unicode`): the byte's own character
    when printable Latin-1, else the next code point from 256 on."""
    printable = {*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)}
    others = iter(range(256, 512))
    return [chr(byte) if byte in printable else chr(next(others)) for byte in range(256)]


BYTE_SYMBOLS = _byte_symbols()


def describe_bytes(values: list[int]) -> str:
    """Byte values as ranges, each byte shown as hex and, when printable ASCII, as itself: `0x00-0x63,
    0x66-0xff` or `0x41 'A'`."""
    def one(byte):
        return f"0x{byte:02x}" + (f" {chr(byte)!r}" if 0x21 <= byte <= 0x7e else "")
    runs, start = [], None
    for i, byte in enumerate(values):
        start = byte if start is None else start
        if i + 1 == len(values) or values[i + 1] != byte + 1:
            runs.append(one(byte) if start == byte else f"{one(start)}-{one(byte)}")
            start = None
    return ", ".join(runs)


def _require_token(backend, candidates, path) -> int:
    for token in candidates:
        token_id = backend.token_to_id(token)
        if token_id is not None:
            return token_id
    raise TokenizerError(f"{path} defines no end-of-document token (looked for {', '.join(candidates)}). "
                         "Add one as a special token; documents are separated by it.")


def _require_file(path, key: str, tokenizer_type: str, what: str) -> str:
    if not path:
        raise TokenizerError(f"tokenizer-type {tokenizer_type} needs `{key}`: {what}. Set it in the config "
                             "(or use ByteLevelTokenizer, which needs no files).")
    if not os.path.isfile(path):
        raise TokenizerError(f"{key} {path} does not exist (tokenizer-type {tokenizer_type} needs {what}).")
    return path


def make_tokenizer(tokenizer_type: str, vocab_file=None, merge_file=None) -> Tokenizer:
    """The tokenizer of a NeoX `tokenizer-type` from its files."""
    if tokenizer_type == "GPT2BPETokenizer":
        vocab = _require_file(vocab_file, "vocab-file", tokenizer_type, "GPT-2's vocab.json")
        merges = _require_file(merge_file, "merge-file", tokenizer_type, "GPT-2's merges.txt")
        return GPT2BPETokenizer(vocab, merges)
    if tokenizer_type == "HFTokenizer":
        return HFTokenizer(_require_file(vocab_file, "vocab-file", tokenizer_type, "a tokenizer.json"))
    if tokenizer_type == "SPMTokenizer":
        return SPMTokenizer(_require_file(vocab_file, "vocab-file", tokenizer_type, "a SentencePiece .model"))
    if tokenizer_type in TOKENIZERS_WITHOUT_FILES:
        return TOKENIZERS_WITHOUT_FILES[tokenizer_type]()
    raise TokenizerError(f"unknown tokenizer-type '{tokenizer_type}'; choose one of {', '.join(TOKENIZER_TYPES)}.")


TOKENIZERS_WITHOUT_FILES = {"ByteLevelTokenizer": ByteLevelTokenizer, "CharLevelTokenizer": CharLevelTokenizer}
TOKENIZER_TYPES = ("GPT2BPETokenizer", "HFTokenizer", "SPMTokenizer", *TOKENIZERS_WITHOUT_FILES)


def padded_vocab_size(tokenizer: Tokenizer, divisible_by: int) -> int:
    """Embedding rows: every id the tokenizer can emit (pad included), rounded up to `divisible_by`."""
    return rows_for(max(tokenizer.vocab_size, tokenizer.pad + 1, tokenizer.eod + 1), divisible_by)


def rows_for(ids: int, divisible_by: int) -> int:
    """`ids` embedding rows rounded up to a multiple of `divisible_by` (make-vocab-size-divisible-by)."""
    return -(-ids // divisible_by) * divisible_by


def build_tokenizer(run: TokenizerRun) -> Tokenizer:
    """The run's tokenizer, with the model's `padded_vocab_size` (to make-vocab-size-divisible-by)."""
    return padded_tokenizer(run.tokenizer_type, run.vocab_file, run.merge_file, run.vocab_divisible_by)


def padded_tokenizer(tokenizer_type: str, vocab_file, merge_file, divisible_by: int) -> Tokenizer:
    """The tokenizer of these files, with `padded_vocab_size`: its vocabulary padded to a multiple of `divisible_by`
    (the model's embedding rows)."""
    tokenizer = make_tokenizer(tokenizer_type, vocab_file, merge_file)
    tokenizer.padded_vocab_size = padded_vocab_size(tokenizer, divisible_by)
    return tokenizer
