"""The two ways to get each row's next-token logits during generation.

- `RecomputedSteps` (`recompute: true`): a full forward of every row's whole sequence at every step,
  rows of equal length batched; no padding, no cache. It is the reference the cache is tested against.
- `CachedSteps`: the prompts once (left-padded, in blocks of `attention-block-size` queries), then
  one token per row per step against the KV cache (megatron/model/kv_cache.py).
"""
import sys

import torch

from megatron.model.kv_cache import KVCache
from megatron.progress import Progress


LONG_PREFILL = 16_384  # prompt tokens from which the prefill says what it does and shows its progress
PREFILL_INTERVAL = 10.0  # seconds between two plain progress lines (megatron/progress.py's rule)


def say(line: str) -> None:
    if _rank_zero():
        print(line, file=sys.stderr, flush=True)


def _rank_zero() -> bool:
    return not (torch.distributed.is_available() and torch.distributed.is_initialized()) or \
        torch.distributed.get_rank() == 0


class RecomputedSteps:
    def __init__(self, model, prompts: list[list[int]], device):
        self.model, self.device = model, device
        self.sequences = [list(p) for p in prompts]

    def first(self) -> torch.Tensor:
        return self._last_logits()

    def next(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens [b]: each row's newest token -> logits [b, V] of the token after it."""
        for sequence, token in zip(self.sequences, tokens.tolist()):
            sequence.append(token)
        return self._last_logits()

    def _last_logits(self) -> torch.Tensor:
        by_length = {}
        for row, sequence in enumerate(self.sequences):
            by_length.setdefault(len(sequence), []).append(row)
        logits = [None] * len(self.sequences)
        for rows in by_length.values():
            batch = torch.tensor([self.sequences[r] for r in rows], device=self.device)
            for row, row_logits in zip(rows, self.model(batch)[:, -1].float()):
                logits[row] = row_logits
        return torch.stack(logits)


class CachedSteps:
    def __init__(self, model, prompts: list[list[int]], device, max_new_tokens: int):
        self.model = model
        longest = max(len(p) for p in prompts)
        # Left-padded, so every row's newest token is in the last column (the pad id is never seen).
        self.tokens = torch.tensor([[0] * (longest - len(p)) + list(p) for p in prompts], device=device)
        self.padding = torch.tensor([[True] * (longest - len(p)) + [False] * len(p) for p in prompts], device=device)
        self.cache = KVCache(len(model.layers), len(prompts), longest + max_new_tokens, device, model.layer_windows())
        self.block = model.attention_config.block_size  # prompt queries per forward: O(H * block * L) terms

    def first(self) -> torch.Tensor:
        length = self.tokens.shape[1]
        blocks = -(-length // self.block)
        long = length >= LONG_PREFILL
        if long:  # a 200,000-token prompt takes minutes before the first new token: say so, then show progress
            say(f"prefill: {length:,} prompt tokens x {self.tokens.shape[0]} row(s) in {blocks:,} blocks of "
                f"{self.block} queries (attention-block-size) before the first new token; progress below")
        with Progress("prefill", total=blocks, unit="block", show=long and _rank_zero(),
                      interval=PREFILL_INTERVAL) as progress:
            for start in range(0, length, self.block):
                end = start + self.block
                logits = self.model(self.tokens[:, start:end], cache=self.cache, padding=self.padding[:, start:end])
                progress.update(1, note=f"{min(end, length):,} tokens")
        return logits[:, -1].float()

    def next(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.model(tokens[:, None], cache=self.cache)[:, -1].float()
