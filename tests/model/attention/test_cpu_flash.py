"""megatron/model/attention/cpu_flash.py calls torch's private CPU flash-attention ops with a mask and causality
together. Private ops can change between torch releases, so their schemas are pinned here (a change
fails this test, not a user's run), and both ops are checked against float64 attention (attention/reference.py):
softmax(q k^T / sqrt(D) + mask) v, with the future hidden by the mask's -inf as the callers pass it."""
import pytest
import torch

from megatron.model.attention import cpu_flash
from megatron.model.attention import reference as attention_reference

pytestmark = pytest.mark.cpu_isa  # torch's compiled CPU kernels


def test_the_private_ops_have_the_schemas_cpu_flash_calls():
    forward = str(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default._schema)
    backward = str(torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward.default._schema)
    assert "(Tensor query, Tensor key, Tensor value, float dropout_p=0., bool is_causal=False, *, " \
           "Tensor? attn_mask=None, float? scale=None) -> (Tensor output, Tensor logsumexp)" in forward
    assert "(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor logsumexp, " \
           "float dropout_p, bool is_causal, *, Tensor? attn_mask=None, float? scale=None)" in backward


def reference(q, k, v, mask):
    """megatron/model/attention/reference.py in float64 with the mask as the bias (-inf: invisible)."""
    return attention_reference.attend(q.double(), k.double(), v.double(), None, None, None,
                                      ~mask.isneginf(), bias=mask.double())


@pytest.mark.parametrize("length", [5, 64, 200])  # one block, and several blocks of the kernel (with a ragged end)
@pytest.mark.parametrize("causal", [True, False])
def test_forward_and_backward_match_float64_attention_with_a_bias_and_the_future_masked(length, causal):
    torch.manual_seed(length)
    heads, dim = 3, 16
    q, k, v = (torch.randn(2, heads, length, dim, requires_grad=True) for _ in range(3))
    bias = torch.randn(1, heads, length, length)
    future = torch.ones(length, length, dtype=torch.bool).triu(1)
    mask = bias.masked_fill(future, float("-inf"))
    out, logsumexp = cpu_flash.attention(q, k, v, mask, causal)
    expected = reference(q, k, v, mask)
    torch.testing.assert_close(out.double(), expected, atol=2e-6, rtol=1e-5)
    grad_out = torch.randn_like(out)
    dq, dk, dv = cpu_flash.attention_backward(grad_out, q, k, v, out, logsumexp, mask, causal)
    expected_grads = torch.autograd.grad(expected, (q, k, v), grad_out.double())
    for got, want in zip((dq, dk, dv), expected_grads):
        torch.testing.assert_close(got.double(), want.double(), atol=2e-5, rtol=1e-4)


def test_causal_only_skips_work_the_result_is_the_same():
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 4, 300, 32) for _ in range(3))
    mask = torch.randn(1, 4, 300, 300).masked_fill(torch.ones(300, 300, dtype=torch.bool).triu(1), float("-inf"))
    # Bit-identical on AVX2 (the skipped key blocks only add exact zeros); a tolerance for other kernels.
    causal, full = (cpu_flash.attention(q, k, v, mask, causal)[0] for causal in (True, False))
    torch.testing.assert_close(causal, full, atol=1e-7, rtol=1e-6)


def test_a_mask_of_another_dtype_is_refused_by_name():
    q = torch.randn(1, 1, 4, 8)
    with pytest.raises(TypeError, match=r"mask dtype torch.float64 differs from q's torch.float32"):
        cpu_flash.attention(q, q, q, torch.zeros(1, 1, 4, 4, dtype=torch.float64), True)
