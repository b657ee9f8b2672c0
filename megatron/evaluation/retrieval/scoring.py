"""Scoring a probe's samples two ways: teacher-forced (the answer's log-probability and ranks under one
forward; paired across methods, and informative for models too small to decode the answer) and greedy
exact match (the KV-cache generation of megatron.text_generation)."""
import torch

from megatron.text_generation import generate_tokens


def teacher_forced(model, samples, vocab_size: int, batch_size: int) -> list[dict]:
    """Per sample: `logprob` (sum over answer tokens, nats), `rank` (mean over answer tokens of how
    many vocabulary entries score above the right one; 0 = top) and `top1` (every answer token is the
    argmax given the right ones before it). `model(tokens[b, L]) -> logits[b, L, V]`."""
    out = []
    for i in range(0, len(samples), batch_size):
        batch = samples[i:i + batch_size]
        tokens = torch.tensor([s.tokens for s in batch])  # [b, L + 1]; one length per grid
        logits = model(tokens[:, :-1])[..., :vocab_size].float()
        for row, sample in enumerate(batch):
            n = len(sample.answer)
            scores = logits[row, -n:].log_softmax(-1)                  # [n, V]: predicts the answer
            target = torch.tensor(sample.answer, device=scores.device)[:, None]
            right = scores.gather(1, target)                            # [n, 1]
            ranks = (scores > right).sum(-1)
            out.append({"logprob": float(right.sum()), "rank": float(ranks.float().mean()),
                        "top1": bool((ranks == 0).all())})
    return out


def greedy_exact(network, samples, vocab_size: int, batch_size: int, recompute: bool = False) -> list[bool]:
    """Per sample: does greedy decoding from the prompt give exactly the answer's tokens?"""
    correct = []
    for i in range(0, len(samples), batch_size):
        batch = samples[i:i + batch_size]
        new = max(len(s.answer) for s in batch)
        continuations = generate_tokens(network, [s.prompt for s in batch], max_new_tokens=new,
                                        vocab_size=vocab_size, recompute=recompute)
        correct += [c[:len(s.answer)] == s.answer for c, s in zip(continuations, batch)]
    return correct
