"""Next-token losses from the final hidden states, the output layer applied LOSS_SLICE positions at a time,
so the [tokens x vocabulary] logits never exist whole: at 16,384 tokens and GPT-2's padded 50,304 rows they are
3.3 GB in fp32 (and 105 GB at 1,048,576 tokens), where one slice is 412 MB.

`token_losses` is an autograd function: the forward keeps, per token, only the log-sum-exp of its logits;
the backward recomputes each slice's logits from the hidden states and the head's weight, and adds that slice's
share of both gradients (softmax minus the one-hot target, times the incoming gradient). The result is the
full logits' cross entropy (the same matmul per row, the same fp32 log-softmax), in a slice's memory.
On CUDA liger-kernel's fused linear cross-entropy (Triton) does the same with fewer passes; it is not used here
until a GPU run measures it against this one.
"""
import torch
import torch.nn.functional as F

LOSS_SLICE = 2048  # positions per slice: 412 MB of fp32 logits with a 50,304-row head


def _slices(n: int):
    return (slice(i, min(i + LOSS_SLICE, n)) for i in range(0, n, LOSS_SLICE))


def _wide(dtype: torch.dtype) -> torch.dtype:
    """The dtype the losses are computed in: fp32 for bf16/fp16/fp32, fp64 stays fp64 (the tests)."""
    return torch.promote_types(dtype, torch.float32)


def _logits(hidden, weight, vocab_size):
    """[n, padded_vocab] with the padding rows' logits -inf: they are no tokens, so they get no probability
    and no gradient. (The whole weight, not weight[:vocab_size]: its matmul is the faster, measured on CPU.)"""
    logits = F.linear(hidden, weight).to(_wide(hidden.dtype))
    logits[:, vocab_size:] = float("-inf")
    return logits


class _SlicedLinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, targets, vocab_size):
        losses = torch.empty(targets.shape, dtype=_wide(hidden.dtype), device=hidden.device)
        lse = torch.empty_like(losses)
        for rows in _slices(targets.shape[0]):
            logits = _logits(hidden[rows], weight, vocab_size)
            losses[rows] = F.cross_entropy(logits, targets[rows], reduction="none")
            lse[rows] = losses[rows] + logits.gather(1, targets[rows, None])[:, 0]  # the backward's softmax
        ctx.save_for_backward(hidden, weight, targets, lse)
        ctx.vocab_size = vocab_size
        return losses

    @staticmethod
    def backward(ctx, grad_losses):
        hidden, weight, targets, lse = ctx.saved_tensors
        vocab = ctx.vocab_size
        grad_hidden = torch.empty_like(hidden) if ctx.needs_input_grad[0] else None
        grad_weight = torch.zeros_like(weight, dtype=_wide(weight.dtype)) if ctx.needs_input_grad[1] else None
        for rows in _slices(targets.shape[0]):
            # d loss / d logits = softmax - one_hot(target), per token times its incoming gradient
            grad = torch.exp(_logits(hidden[rows], weight, vocab).sub_(lse[rows, None]))
            grad[torch.arange(grad.shape[0], device=grad.device), targets[rows]] -= 1.0
            grad = grad.mul_(grad_losses[rows, None]).to(hidden.dtype)
            if grad_hidden is not None:
                grad_hidden[rows] = grad @ weight
            if grad_weight is not None:
                grad_weight += grad.t().to(grad_weight.dtype) @ hidden[rows].to(grad_weight.dtype)
        return grad_hidden, None if grad_weight is None else grad_weight.to(weight.dtype), None, None


def token_losses(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """hidden [..., h], the head's weight [padded_vocab, h], targets [...] -> fp32 cross entropy [...] over the
    first `vocab_size` rows. Under autocast the matmuls run in autocast's dtype, as F.linear's would."""
    device = hidden.device.type
    if torch.is_autocast_enabled(device):
        dtype = torch.get_autocast_dtype(device)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
    shape = targets.shape
    with torch.autocast(device, enabled=False):
        losses = _SlicedLinearCrossEntropy.apply(hidden.reshape(-1, hidden.shape[-1]), weight,
                                                 targets.reshape(-1).to(hidden.device), vocab_size)
    return losses.view(shape)


def logits_losses(logits: torch.Tensor, targets: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """The same cross entropy from whole logits [..., padded_vocab] (`loss-head: full`, and callers that have
    only logits): fp32 [...] over the first `vocab_size` rows."""
    logits = logits[..., :vocab_size]
    losses = F.cross_entropy(logits.flatten(0, -2).to(_wide(logits.dtype)), targets.flatten().to(logits.device),
                             reduction="none")
    return losses.view(targets.shape)


def sliced(loss_head: str, device: torch.device) -> bool:
    """`loss-head`: auto is sliced on CPU (measured leaner, docs/performance.md) and wherever no gradient is taken
    (evaluation: the same matmuls, slice by slice, nothing recomputed); training on CUDA keeps the full logits
    until a GPU run measures the sliced head's recomputation there."""
    if loss_head != "auto":
        return loss_head == "sliced"
    return device.type == "cpu" or not torch.is_grad_enabled()
