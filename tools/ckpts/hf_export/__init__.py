"""Export a checkpoint of this project to a Hugging Face folder (tools/ckpts/convert_to_hf.py).

- `rotary` and `none` models whose layers GPT-NeoX can hold -> transformers' own GPTNeoXForCausalLM
  (native.py), loadable with no custom code;
- every other model -> a folder that loads with trust_remote_code: a decoder (templates/) and the
  method's own files from megatron/model/positional_embeddings, copied unchanged (custom.py).
Both folders carry safetensors weights and tokenizer files that encode like this project's (tokenizer.py).
"""
from .errors import ExportError
from .export import TARGETS, export_checkpoint, export_model
from .source import Source, load_source

__all__ = ["ExportError", "Source", "TARGETS", "export_checkpoint", "export_model", "load_source"]
