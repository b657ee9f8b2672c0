"""The output layer and cross entropy by slices of positions (megatron/model/sliced_loss.py) against the full
logits' F.cross_entropy in float64: losses, and the gradients of the hidden states and of the head's weight,
over several slices with a padded vocabulary; under bf16 autocast against F.linear's bf16 logits."""
import pytest
import torch
import torch.nn.functional as F

from megatron.model import sliced_loss
from megatron.model.sliced_loss import token_losses


def full_logits_losses(hidden, weight, targets, vocab):
    logits = F.linear(hidden, weight)[..., :vocab]
    return F.cross_entropy(logits.flatten(0, -2).to(torch.promote_types(logits.dtype, torch.float32)),
                           targets.flatten(), reduction="none").view(targets.shape)


@pytest.mark.parametrize("slice_positions", [7, 64, 2048])
def test_losses_and_gradients_are_the_full_logits_in_float64(slice_positions, monkeypatch):
    monkeypatch.setattr(sliced_loss, "LOSS_SLICE", slice_positions)  # several slices, a ragged last one, one
    torch.manual_seed(0)
    vocab, padded, h = 50, 56, 12
    hidden = torch.randn(3, 20, h, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(padded, h, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, vocab, (3, 20))
    upstream = torch.rand(3, 20, dtype=torch.float64) * (torch.rand(3, 20) > 0.3)  # a loss mask's zeros too

    got = token_losses(hidden, weight, targets, vocab)
    got_hidden, got_weight = torch.autograd.grad((got * upstream).sum(), (hidden, weight))
    expected = full_logits_losses(hidden, weight, targets, vocab)
    want_hidden, want_weight = torch.autograd.grad((expected * upstream).sum(), (hidden, weight))
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_hidden, want_hidden, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got_weight, want_weight, rtol=1e-12, atol=1e-12)
    assert torch.all(got_weight[vocab:] == 0)  # the padding rows are no tokens


def test_under_bf16_autocast_the_matmuls_are_bf16_as_f_linear():
    torch.manual_seed(0)
    hidden = torch.randn(2, 30, 16, requires_grad=True)
    weight = torch.randn(40, 16, requires_grad=True)
    targets = torch.randint(0, 37, (2, 30))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = token_losses(hidden, weight, targets, 37)
        expected = full_logits_losses(hidden, weight, targets, 37)
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    got_grads = torch.autograd.grad(got.sum(), (hidden, weight))
    want_grads = torch.autograd.grad(expected.sum(), (hidden, weight))
    for g, w in zip(got_grads, want_grads):
        assert g.dtype == w.dtype == torch.float32
        torch.testing.assert_close(g, w, rtol=2e-2, atol=2e-2)  # bf16 products: rounding differs per order


def test_the_models_training_loss_and_gradients_are_the_full_heads(monkeypatch):
    """GPTModel(tokens, labels=...) with `loss-head: sliced` (3 slices) against `full`, float64: the losses and
    every parameter's gradient (the tied embedding's included)."""
    from tests.support.generation import tiny_model
    monkeypatch.setattr(sliced_loss, "LOSS_SLICE", 11)
    model = tiny_model("rotary").double().train()
    tokens = torch.randint(0, 300, (2, 17))
    results = {}
    for head in ("full", "sliced"):
        model.loss_head = head
        model.zero_grad(set_to_none=True)
        losses = model(tokens[:, :-1], labels=tokens[:, 1:], vocab_size=300)
        (losses * torch.linspace(0, 1, 16, dtype=torch.float64)).sum().backward()
        results[head] = losses.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}
    torch.testing.assert_close(results["sliced"][0], results["full"][0], rtol=1e-12, atol=1e-12)
    for name, grad in results["full"][1].items():
        torch.testing.assert_close(results["sliced"][1][name], grad, rtol=1e-10, atol=1e-12, msg=name)
