"""`fox` evaluated through the compiled kernel (inductor calls the C++ compiler): the gate handed to the kernel as
one row per block is still the paper's attention (the float64 formula of tests/support/fox.py)."""
import pytest
import torch

from megatron.model.attention import AttentionRun, attend, plan_attention, token_terms
from tests.support.fox import D, H, float64_reference, theirs_and_ours


@pytest.mark.parametrize("length", [45, 700, 2000])  # one partial block, one block, two blocks (the second partial)
def test_evaluation_gives_the_kernel_the_gate_as_one_row_per_block(length):
    # Without gradients, in float32 and without a window, blocked_token_terms hands -(F_j - F_middle) to the
    # kernel as one row per head, broadcast over a block's queries (token_terms.folded_token_terms_attention):
    # still the paper's attention.
    _, _, pe = theirs_and_ours(seed=4)
    torch.manual_seed(5)
    x = torch.randn(1, length, H * D)
    q, k, v = (torch.randn(1, H, length, D) for _ in range(3))
    with torch.no_grad():
        F = pe.token_terms(x).cumsum(-1)
    assert token_terms.folds(q, k, v, F, window=None)
    assert not token_terms.folds(q, k, v, F, window=9) and not token_terms.folds(q.bfloat16(), k, v, F, None)
    assert not token_terms.folds(q.requires_grad_(), k, v, F, window=None)  # training keeps the masked blocks
    with torch.no_grad():
        plan = plan_attention(pe, torch.arange(length), AttentionRun(impl="auto", window=None, block_size=16,
                                                                     needs_grad=False, dropout_p=0.0))
        assert plan.name == "blocked_token_terms"
        folded = attend(q, k, v, plan.with_layer(pe.layer_values(x)))
        masked = token_terms.TokenTermsAttention.apply(q, k, v, F, torch.arange(length), None, 128)
    expected = float64_reference(q, k, v, x, pe.gate_weight.detach(), pe.gate_bias.detach())
    # These gates forget strongly (F reaches -1211 at 700 tokens, -3500 at 2,000): F's float32 running sum
    # alone costs the masked blocks 6e-5 and 2e-4 there. The row the kernel adds, F_j - F_middle, rounds
    # in its float32 sum to about eps x |F_i - F_middle| more for the keys that carry weight (at most half
    # a block of forgetting): the folded output may lose that much on top of the masked blocks' error.
    block = token_terms.FOLD_BLOCK
    middles = torch.tensor([(s + min(s + block, length)) // 2 for s in range(0, length, block)])
    spread = (F - F[..., middles].repeat_interleave(block, dim=-1)[..., :length]).abs().max().item()
    folded_error, masked_error = ((out.double() - expected).abs().max().item() for out in (folded, masked))
    assert folded_error <= max(masked_error + 2**-23 * spread, 2e-5), (folded_error, masked_error, spread)


def test_the_compiled_flex_kernel_gives_the_float64_formula():
    _, _, pe = theirs_and_ours(seed=4)
    b, length = 2, 130  # two tiles, the second partial
    x = torch.randn(b, length, H * D)
    q, k, v = (torch.randn(b, H, length, D) for _ in range(3))
    with torch.no_grad():
        plan = plan_attention(pe, torch.arange(length), AttentionRun(impl="flex", window=None, block_size=64,
                                                                     needs_grad=False, dropout_p=0.0))
        ours = attend(q, k, v, plan.with_layer(pe.layer_values(x)))  # checked against eager on CPU, too
    expected = float64_reference(q, k, v, x, pe.gate_weight.detach(), pe.gate_bias.detach())
    torch.testing.assert_close(ours.double(), expected, rtol=0, atol=2e-5)
