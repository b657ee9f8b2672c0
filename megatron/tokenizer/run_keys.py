"""The keys of a run's config that building its tokenizer reads, as one typed record the config package builds
(`NeoXArgs.tokenizer_run()`): build_tokenizer takes it, never the run config itself."""
from dataclasses import dataclass


@dataclass(frozen=True)
class TokenizerRun:
    tokenizer_type: str                   # tokenizer-type (TOKENIZER_TYPES)
    vocab_file: str | None                # the files of a BPE, SentencePiece or Hugging Face tokenizer
    merge_file: str | None
    vocab_divisible_by: int               # make-vocab-size-divisible-by: the embedding rows are padded to it
