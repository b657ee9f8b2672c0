"""Tokenizers: `build_tokenizer(run)` returns the run's tokenizer (`run`: a TokenizerRun, which the config package
builds: `NeoXArgs.tokenizer_run()`), with the model's padded_vocab_size."""
from .tokenizer import (TOKENIZER_TYPES, ByteLevelTokenizer, CharLevelTokenizer, GPT2BPETokenizer,
                        HFTokenizer, SPMTokenizer, Tokenizer, TokenizerError, build_tokenizer,
                        make_tokenizer, padded_tokenizer, padded_vocab_size)
from .run_keys import TokenizerRun

__all__ = ["TOKENIZER_TYPES", "ByteLevelTokenizer", "CharLevelTokenizer", "GPT2BPETokenizer", "HFTokenizer",
           "SPMTokenizer", "Tokenizer", "TokenizerError", "build_tokenizer", "make_tokenizer",
           "padded_tokenizer", "padded_vocab_size", "TokenizerRun"]
