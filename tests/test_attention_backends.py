"""Every mask the `sdpa` and `blocked` paths hand to SDPA is one its fused kernels accept.

A 3-D or non-contiguous mask sends SDPA to its unfused math kernel (about 4x causal attention on CPU
at L = 512, issue 12). The check asks torch's own dispatcher (`torch._fused_sdp_choice`, the function
SDPA calls to pick a kernel) for every call the paths make, so no timing is involved. Methods with a
multiplicative weight (kerple_bias_weight) write the softmax out and make no SDPA call."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

import megatron.model.attention as attention
from megatron.model.attention import attend, plan_attention
from megatron.model.positional_embeddings import available, build_positional_embedding

HEADS, HEAD_DIM, LENGTH, BLOCK = 4, 16, 96, 32
FUSED = {int(SDPBackend.FLASH_ATTENTION), int(SDPBackend.EFFICIENT_ATTENTION), int(SDPBackend.CUDNN_ATTENTION)}


def recorded_backends(monkeypatch):
    """Wrap SDPA as attention.py sees it; record the backend torch picks for each call."""
    chosen, original = [], F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        chosen.append((torch._fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal), attn_mask))
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    monkeypatch.setattr(attention.F, "scaled_dot_product_attention", sdpa)  # F is torch.nn.functional
    return chosen


def check_fused(name, impl, device, dtype, monkeypatch, window=None, grad=False):
    torch.manual_seed(0)
    pe = build_positional_embedding(name, num_heads=HEADS, head_dim=HEAD_DIM, hidden_size=HEADS * HEAD_DIM,
                                    **({"max_position_embeddings": 4 * LENGTH} if name == "learned" else {}))
    pe = pe.to(device)
    q, k, v = (torch.randn(2, HEADS, LENGTH, HEAD_DIM, device=device, dtype=dtype) for _ in range(3))
    chosen = recorded_backends(monkeypatch)
    with torch.set_grad_enabled(grad):
        plan = plan_attention(pe, torch.arange(LENGTH, device=device), impl=impl, window=window,
                              block_size=BLOCK, needs_grad=grad, dropout_p=0.0)
        attend(q, k, v, plan)
    unfused = [(backend, None if mask is None else (tuple(mask.shape), mask.stride(), mask.requires_grad))
               for backend, mask in chosen if backend not in FUSED]
    assert not unfused, f"{name} on {impl}: SDPA calls on the math kernel (backend, mask shape/stride/grad): {unfused}"


@pytest.mark.parametrize("window", [None, 40])
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
@pytest.mark.parametrize("name", available())
def test_cpu_masks_keep_the_fused_kernel(name, impl, window, monkeypatch):
    check_fused(name, impl, "cpu", torch.float32, monkeypatch, window=window)


@pytest.mark.cuda
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
@pytest.mark.parametrize("name", available())
def test_cuda_masks_keep_the_fused_kernel(name, impl, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    check_fused(name, impl, "cuda", torch.bfloat16, monkeypatch)
