"""The model: `GPTModel(neox_args, vocab_size)` and its optimizer parameter groups."""
from megatron.model.gpt_model import GPTModel
from megatron.model.weight_decay import get_params_for_weight_decay_optimization

__all__ = ["GPTModel", "get_params_for_weight_decay_optimization"]
