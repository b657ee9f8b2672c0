"""Tokenizers: `build_tokenizer(neox_args)` returns the config's tokenizer, with the model's padded_vocab_size."""
from .tokenizer import (TOKENIZER_TYPES, ByteLevelTokenizer, CharLevelTokenizer, GPT2BPETokenizer,
                        HFTokenizer, SPMTokenizer, Tokenizer, TokenizerError, build_tokenizer,
                        make_tokenizer, padded_tokenizer, padded_vocab_size)

__all__ = ["TOKENIZER_TYPES", "ByteLevelTokenizer", "CharLevelTokenizer", "GPT2BPETokenizer", "HFTokenizer",
           "SPMTokenizer", "Tokenizer", "TokenizerError", "build_tokenizer", "make_tokenizer",
           "padded_tokenizer", "padded_vocab_size"]
