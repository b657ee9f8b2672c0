"""The tokenizer files of an export: written by megatron/tokenizer/hf_files.py, which eval.py also uses
(it hands lm-eval's RULER tasks the run's tokenizer), since entry points import nothing from tools/."""
from megatron.tokenizer.hf_files import EOD_TEXT, PAD_TEXT, bytes_to_unicode, export_tokenizer  # noqa: F401
