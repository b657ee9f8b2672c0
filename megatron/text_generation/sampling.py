"""Choosing the next token from logits: greedy, or sampled with temperature, top-k and top-p
(upstream NeoX's `filter_logits`: top-k first, then the nucleus)."""
import math

import torch


def setting_problems(max_new_tokens: int, temperature: float, top_k: int, top_p: float) -> list[tuple[str, str]]:
    """(config key, what is wrong) for each out-of-range generation setting."""
    problems = []
    if max_new_tokens < 0:
        problems.append(("maximum_tokens", f"must be >= 0, got {max_new_tokens}."))
    if not (math.isfinite(temperature) and temperature >= 0):  # nan and inf pass a plain `< 0` test
        problems.append(("temperature", f"must be a finite number >= 0 (0 is greedy), got {temperature}."))
    if top_k < 0:
        problems.append(("top_k", f"must be >= 0 (0 keeps every token, 1 is greedy), got {top_k}."))
    if not 0.0 <= top_p <= 1.0:  # nan fails it too
        problems.append(("top_p", f"must lie in [0, 1] (0 is off), got {top_p}."))
    return problems


def is_greedy(temperature: float, top_k: int) -> bool:
    return temperature == 0.0 or top_k == 1


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 0.0) -> torch.Tensor:
    """logits [b, V] with everything outside the top k, then outside the nucleus, set to -inf.

    The nucleus is the smallest set of most likely tokens whose probability reaches top_p; its most
    likely token always stays, so no row is left empty."""
    if top_k > 0:
        kth = logits.topk(min(top_k, logits.shape[-1]), dim=-1).values[..., -1:]  # [b, 1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p > 0.0:
        sorted_logits, order = logits.sort(dim=-1, descending=True)
        cumulative = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        # Drop a token when the tokens before it already reach top_p.
        drop_sorted = (cumulative - sorted_logits.softmax(dim=-1)) >= top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def choose_next(logits: torch.Tensor, *, temperature: float, top_k: int, top_p: float,
                generator: torch.Generator) -> torch.Tensor:
    """logits [b, V] (float) -> LongTensor [b] of next tokens."""
    if is_greedy(temperature, top_k):
        return logits.argmax(dim=-1)
    logits = filter_logits(logits.float() / temperature, top_k, top_p)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)
