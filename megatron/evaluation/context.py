"""What an evaluation mode is given at one length: the model, the stream, the chunks, and loss passes.

`losses(name, score)` runs a scoring pass (megatron/evaluation/scoring.py) over this rank's share of
the chunks, gathers every rank's rows back in chunk order and keeps the result, so two modes that ask
for the same pass (`nonoverlap` and `position`) score the chunks once.
"""
import time

import numpy as np
import torch

from megatron.progress import Progress

from .results import summarize
from .settings import EvaluationSettings


class ModeContext:
    def __init__(self, model, stream: np.ndarray, starts: np.ndarray, length: int, settings: EvaluationSettings,
                 vocab_size: int, network=None, tokenizer=None):
        self.model, self.stream, self.starts, self.length = model, stream, starts, length
        self.settings, self.vocab_size = settings, vocab_size
        # For modes that make prompts and decode (probes): the GPTModel itself and the tokenizer.
        self.network, self.tokenizer = network, tokenizer
        self.mode = None            # the mode being scored (set by the caller before each mode)
        self.seconds = 0.0          # time of the passes the current mode used
        self._passes = {}           # name -> (losses, seconds)

    def losses(self, name: str, score) -> np.ndarray:
        """[chunks, L] per-token losses of pass `name`: score(model=, stream=, starts=, length=,
        batch_size=, progress=, vocab_size=) over this rank's chunks, gathered over ranks."""
        if name not in self._passes:
            args = self.settings
            # this rank's share of the chunks: every replica-th (sequence parallelism: a replica's ranks score
            # the same chunks, each its shard of every sequence, and get the whole losses back)
            replicas = args.world_size // args.sequence_parallel_size
            mine = self.starts[args.rank // args.sequence_parallel_size::replicas]
            began = time.perf_counter()
            with _ProgressBar(f"L={self.length} {name}", len(mine), args.rank == 0) as progress:
                losses = score(model=self.model, stream=self.stream, starts=mine, length=self.length,
                               batch_size=args.micro_batch_size, progress=progress,
                               vocab_size=self.vocab_size)
            self._passes[name] = (_gathered(losses, args.world_size, args.sequence_parallel_size),
                                  time.perf_counter() - began)
        losses, seconds = self._passes[name]
        self.seconds += seconds
        return losses

    def summary(self, losses: np.ndarray) -> dict:
        """The record fields every mode shares (loss, ppl, chunks, stderr, per-chunk losses)."""
        return summarize(losses, self.length, self.mode, self.starts)


def _gathered(losses: np.ndarray, world_size: int, sequence_parallel_size: int = 1) -> np.ndarray:
    """Every replica's [its chunks, L] losses back in chunk order (replica r scored chunks r, r + replicas, ...;
    a replica is one rank, or a sequence-parallel group whose ranks hold the same losses)."""
    if world_size == 1:
        return losses
    parts = [None] * world_size
    torch.distributed.all_gather_object(parts, losses)
    parts = parts[::sequence_parallel_size]  # one rank of each replica
    replicas = len(parts)
    out = np.empty((sum(len(p) for p in parts), losses.shape[1]), dtype=losses.dtype)
    for rank, part in enumerate(parts):
        out[rank::replicas] = part
    return out


class _ProgressBar:
    """Chunks scored (megatron/progress.py), with scored-input tokens per second as its note."""

    def __init__(self, desc, total, show):
        self.progress = Progress(desc, total=total, unit="chunk", show=show)
        self.tokens, self.began = 0, time.perf_counter()

    def __enter__(self):
        return self

    def __call__(self, chunks, tokens):
        self.tokens += tokens
        self.progress.update(chunks, note=f"{self.tokens / (time.perf_counter() - self.began):,.0f} tok/s")

    def __exit__(self, error_type, *exc):
        self.progress.close(finished=error_type is None)
