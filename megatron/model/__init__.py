"""The model: `GPTModel(config: ModelConfig)` and its optimizer parameter groups.

Both are loaded on first use, not at import: importing a leaf of this package (an attention kernel,
a positional method) must not build GPTModel's whole module graph first."""
import importlib

_EXPORTS = {"GPTModel": "megatron.model.gpt_model",
            "get_params_for_weight_decay_optimization": "megatron.model.weight_decay"}

__all__ = list(_EXPORTS)


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
