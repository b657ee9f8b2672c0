"""Export a checkpoint of this project to a Hugging Face folder (tools/ckpts/convert_to_hf.py).

- `rotary` and `none` models whose layers GPT-NeoX can hold -> transformers' own GPTNeoXForCausalLM
  (native.py), loadable with no custom code;
- every other model -> a self-contained folder with a configuration and modeling file written from
  templates/ (only the exported method's positional code), loadable with trust_remote_code (custom.py).
Both folders carry safetensors weights and tokenizer files that encode like this project's (tokenizer.py).
"""
from .errors import ExportError
from .export import TARGETS, export_checkpoint, export_model
from .source import Source, load_source

__all__ = ["ExportError", "Source", "TARGETS", "export_checkpoint", "export_model", "load_source"]
