"""Where rotary's rotation runs: CUDA tensors through the fused Triton kernel (rotary_kernel.py), everything
else through the positional method's own eager code (`pe.rotate`, which the exported Hugging Face folders
carry too). Both are tested against a float64 rotation."""
import torch


def rotate(pe, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [b, H, s, D] rotated by the method's tables (pe.rotation_tables)."""
    if x.is_cuda:
        # Imported here: Triton comes with torch's CUDA wheels, and a CPU-only install may not have it.
        from megatron.model.attention.rotary_kernel import fused_rotate
        return fused_rotate(x, cos, sin)
    return pe.rotate(x, cos, sin)
