"""GPT-NeoX's weight initialisations: all are N(0, std); they differ in the std.

`init_method` applies to weights that read the residual stream (embedding, QKV, MLP input, untied
output head); `output_layer_init_method` to those that write into it (attention output, MLP output).
"""
import math

import torch.nn as nn

INIT_STDS = {
    "normal": lambda sigma, num_layers, hidden_size: sigma,
    # GPT-2 / Megatron: shrink the residual writes so the stream's variance does not grow with depth.
    "scaled_normal": lambda sigma, num_layers, hidden_size: sigma / math.sqrt(2 * num_layers),
    # Nguyen & Salazar 2019, "Transformers without Tears".
    "small_init": lambda sigma, num_layers, hidden_size: math.sqrt(2 / (5 * hidden_size)),
    # Wang 2021 (GPT-J's mesh-transformer-jax).
    "wang_init": lambda sigma, num_layers, hidden_size: 2 / (num_layers * math.sqrt(hidden_size)),
}


def init_std(method: str, config) -> float:
    """The std of `method` for model `config` (a ModelConfig)."""
    return INIT_STDS[method](config.init_method_std, config.num_layers, config.hidden_size)


def init_normal_(weight, method: str, config):
    nn.init.normal_(weight, mean=0.0, std=init_std(method, config))
