"""Every mask the `sdpa` and `blocked` paths hand to SDPA is one its fused kernels accept.

A 3-D or non-contiguous mask sends SDPA to its unfused math kernel (about 4x causal attention on CPU
at L = 512, issue 12). The check asks torch's own dispatcher (`torch._fused_sdp_choice`, the function
SDPA calls to pick a kernel) for every call the paths make, so no timing is involved. On CPU the
paths also call the flash kernel directly (megatron/model/attention/cpu_flash.py, to pass the mask's causality
along); those calls are asked about the same way, for the mask they pass. Methods with a
multiplicative weight (kerple_bias_weight) write the softmax out and make no SDPA call."""
import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend

from megatron.model.attention import cpu_flash
from megatron.model.attention import AttentionRun, attend, plan_attention
from megatron.model.positional_embeddings import available, build_positional_embedding

HEADS, HEAD_DIM, LENGTH, BLOCK = 4, 16, 96, 32
FUSED = {int(SDPBackend.FLASH_ATTENTION), int(SDPBackend.EFFICIENT_ATTENTION), int(SDPBackend.CUDNN_ATTENTION)}


def make_pe(name, device="cpu"):
    torch.manual_seed(0)
    pe = build_positional_embedding(name, num_heads=HEADS, head_dim=HEAD_DIM, hidden_size=HEADS * HEAD_DIM,
                                    **({"max_position_embeddings": 4 * LENGTH} if name == "learned" else {}))
    return pe.to(device)


def learnable_distance_only(name):
    pe = make_pe(name)
    bias, weight = pe.distance_tables(4)
    return ("query_terms" not in pe.channels) and weight is None and bias is not None and bias.requires_grad


LEARNABLE = [name for name in available() if learnable_distance_only(name)]


def recorded_backends(monkeypatch):
    """Wrap SDPA as the attention strategies see it, and the direct CPU flash calls; record the backend torch's
    dispatcher picks for each call's q, k, v and mask."""
    chosen, original = [], F.scaled_dot_product_attention

    def sdpa(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, **kw):
        chosen.append((torch._fused_sdp_choice(q, k, v, attn_mask, dropout_p, is_causal), attn_mask))
        return original(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, **kw)

    forward, backward = cpu_flash.attention, cpu_flash.attention_backward

    def flash(q, k, v, mask, causal):
        chosen.append((torch._fused_sdp_choice(q, k, v, mask, 0.0, causal), mask))
        return forward(q, k, v, mask, causal)

    def flash_backward(grad_out, q, k, v, out, logsumexp, mask, causal):
        chosen.append((torch._fused_sdp_choice(q, k, v, mask, 0.0, causal), mask))
        return backward(grad_out, q, k, v, out, logsumexp, mask, causal)

    monkeypatch.setattr(F, "scaled_dot_product_attention", sdpa)
    monkeypatch.setattr(cpu_flash, "attention", flash)
    monkeypatch.setattr(cpu_flash, "attention_backward", flash_backward)
    return chosen


def check_fused(name, impl, device, dtype, monkeypatch, window=None, grad=False):
    pe = make_pe(name, device)
    q, k, v = (torch.randn(2, HEADS, LENGTH, HEAD_DIM, device=device, dtype=dtype, requires_grad=grad)
               for _ in range(3))
    chosen = recorded_backends(monkeypatch)
    with torch.set_grad_enabled(grad):
        plan = plan_attention(pe, torch.arange(LENGTH, device=device),
                              AttentionRun(impl=impl, window=window, block_size=BLOCK, needs_grad=grad, dropout_p=0.0,
                                           dtype=dtype, batch=2))
        out = attend(q, k, v, plan)
        if grad:
            out.float().square().sum().backward()
    unfused = [(backend, None if mask is None else (tuple(mask.shape), mask.stride(), mask.requires_grad))
               for backend, mask in chosen if backend not in FUSED]
    assert not unfused, f"{name} on {impl}: SDPA calls on the math kernel (backend, mask shape/stride/grad): {unfused}"
    return plan, chosen


@pytest.mark.parametrize("window", [None, 40])
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
@pytest.mark.parametrize("name", available())
def test_cpu_masks_keep_the_fused_kernel(name, impl, window, monkeypatch):
    check_fused(name, impl, "cpu", torch.float32, monkeypatch, window=window)


@pytest.mark.parametrize("window", [None, 40])
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
@pytest.mark.parametrize("name", LEARNABLE)
def test_cpu_table_gradient_keeps_the_fused_kernel(name, impl, window, monkeypatch):
    # With gradients a learnable bias would send SDPA to its math kernel; the table gradient keeps
    # the mask a constant, forward and backward.
    plan, chosen = check_fused(name, impl, "cpu", torch.float32, monkeypatch, window=window, grad=True)
    assert plan.table_grad, f"{name}: a learnable bias table should take the table gradient"
    assert chosen, "no attention call was recorded"


def test_some_methods_have_learnable_tables():
    assert {"kerple_log", "t5"} <= set(LEARNABLE)


@pytest.mark.cuda
@pytest.mark.parametrize("grad", [False, True])
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
@pytest.mark.parametrize("name", available())
def test_cuda_masks_keep_the_fused_kernel(name, impl, grad, monkeypatch):
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    if grad and name not in LEARNABLE:
        pytest.skip("with gradients: the learnable distance tables (the others' masks are the same as without)")
    check_fused(name, impl, "cuda", torch.bfloat16, monkeypatch, grad=grad)
