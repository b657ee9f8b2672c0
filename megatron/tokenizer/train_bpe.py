"""Train a GPT-2-style byte-level BPE tokenizer on a corpus with the `tokenizers` library.

The result is a `tokenizer.json` for `tokenizer-type: HFTokenizer`: byte-level, so it encodes any
text without unknown tokens, with `<|endoftext|>` (EOD) and `<|padding|>` (pad) as special tokens.
"""
from typing import Iterable, Optional

from .tokenizer import HFTokenizer, TokenizerError

SPECIAL_TOKENS = ["<|endoftext|>", "<|padding|>"]


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int, output_path: str,
                        num_texts: Optional[int] = None, show_progress: bool = True) -> HFTokenizer:
    """Learn `vocab_size` ids (256 bytes + the special tokens + merges) from `texts`; save and load it."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    minimum = 256 + len(SPECIAL_TOKENS)
    if vocab_size < minimum:
        raise TokenizerError(f"vocab size {vocab_size} is too small: a byte-level BPE needs at least "
                             f"{minimum} ids (256 bytes + {len(SPECIAL_TOKENS)} special tokens).")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=show_progress)
    tokenizer.train_from_iterator(texts, trainer=trainer, length=num_texts)
    tokenizer.save(output_path)
    return HFTokenizer(output_path)
