"""The normalisation layer selected by the `norm` key.

torch's LayerNorm and RMSNorm run fused kernels on CPU and CUDA, so Apex's FusedLayerNorm (an
optional compiled extension upstream) brings nothing here.
"""
import torch.nn as nn

NORMS = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm}


def build_norm(config) -> nn.Module:
    """The norm of model `config` (a ModelConfig)."""
    return NORMS[config.norm](config.hidden_size, eps=config.layernorm_epsilon)
