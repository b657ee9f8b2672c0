"""A SentencePiece tokenizer that encodes exactly as the exporting project's SPMTokenizer did:
`SentencePieceProcessor.encode(text)`, no BOS/EOS added, no extra prefix handling. Needs sentencepiece."""
import os
import shutil

import sentencepiece
from transformers import PreTrainedTokenizer

VOCAB_FILES_NAMES = {"vocab_file": "spm.model"}


class NeoXSentencePieceTokenizer(PreTrainedTokenizer):
    vocab_files_names = VOCAB_FILES_NAMES
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, vocab_file, **kwargs):
        self.vocab_file = vocab_file
        self.sp = sentencepiece.SentencePieceProcessor(model_file=vocab_file)
        kwargs.setdefault("split_special_tokens", True)  # "</s>" in text is text, as in the project
        super().__init__(**kwargs)

    @property
    def vocab_size(self):
        return self.sp.get_piece_size()

    def get_vocab(self):
        return {self.sp.id_to_piece(i): i for i in range(self.vocab_size)}

    def _tokenize(self, text, **kwargs):
        return self.sp.encode(text, out_type=str)

    def _convert_token_to_id(self, token):
        return self.sp.piece_to_id(token)

    def _convert_id_to_token(self, index):
        return self.sp.id_to_piece(index)

    def convert_tokens_to_string(self, tokens):
        return self.sp.decode_pieces(list(tokens))

    def save_vocabulary(self, save_directory, filename_prefix=None):
        target = os.path.join(save_directory, (filename_prefix + "-" if filename_prefix else "") + "spm.model")
        if os.path.abspath(target) != os.path.abspath(self.vocab_file):
            shutil.copyfile(self.vocab_file, target)
        return (target,)
