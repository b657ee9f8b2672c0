"""The normalisation layer selected by the `norm` key.

torch's LayerNorm and RMSNorm run fused kernels on CPU and CUDA, so Apex's FusedLayerNorm (an
optional compiled extension upstream) brings nothing here.
"""
import torch.nn as nn

NORMS = {"layernorm": nn.LayerNorm, "rmsnorm": nn.RMSNorm}


def build_norm(neox_args) -> nn.Module:
    return NORMS[neox_args.norm](neox_args.hidden_size, eps=neox_args.layernorm_epsilon)
