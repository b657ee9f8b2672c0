"""Per-token losses over a token stream, for any `model(tokens[b, s], labels=[b, s], vocab_size=V) -> losses[b, s]`
callable (GPTModel: the head and the loss by slices of positions, megatron/model/sliced_loss.py, so the
[L x vocabulary] logits never exist).

`vocab_size` cuts the logits to the tokenizer's vocabulary: the rows that pad the output layer are no
tokens and get no probability, as in training's loss (megatron/training.lm_loss).

Every mode reduces to a matrix of per-token losses [chunks, L] over the same chunk targets:
`nonoverlap` scores each chunk on its own; `sliding` scores the same targets with earlier context from
the stream; `position` averages the non-overlapping matrix over chunks instead of over positions.
"""
import numpy as np
import torch

from .chunks import sliding_windows


def window_losses(model, windows: torch.Tensor, vocab_size: int | None = None) -> torch.Tensor:
    """windows [b, s + 1] token ids -> losses [b, s] (fp32) of predicting windows[:, 1:]."""
    inputs, targets = windows[:, :-1], windows[:, 1:]
    if hasattr(model, "sequence_losses"):  # a sequence-parallel group's scorer (megatron/parallel): its shards' losses
        return model.sequence_losses(inputs, targets, vocab_size)
    return model(inputs, labels=targets.to(inputs.device), vocab_size=vocab_size).float().cpu()


def _batches(n: int, batch_size: int):
    for i in range(0, n, batch_size):
        yield slice(i, min(i + batch_size, n))


def nonoverlap_losses(model, stream: np.ndarray, starts: np.ndarray, length: int, batch_size: int,
                      progress=None, vocab_size: int | None = None) -> np.ndarray:
    """Losses [chunks, L] of each chunk stream[c : c + L + 1] scored on its own."""
    out = np.empty((len(starts), length), dtype=np.float32)
    for rows in _batches(len(starts), batch_size):
        windows = np.stack([stream[c:c + length + 1] for c in starts[rows]])
        out[rows] = window_losses(model, torch.from_numpy(windows.astype(np.int64)), vocab_size).numpy()
        if progress is not None:
            progress(rows.stop - rows.start, windows.shape[0] * length)
    return out


def sliding_losses(model, stream: np.ndarray, starts: np.ndarray, length: int, stride: int,
                   batch_size: int, progress=None, vocab_size: int | None = None) -> np.ndarray:
    """Losses [chunks, L] of the same targets as `nonoverlap_losses`, each scored once by a window of
    L inputs that reaches back before the chunk (see chunks.sliding_windows)."""
    # Flatten (chunk, window) pairs so batches are full regardless of windows per chunk.
    plan = []  # (chunk row, window start, first, last)
    for row, c in enumerate(starts):
        for s, first, last in zip(*sliding_windows(int(c), length, stride)):
            plan.append((row, int(s), int(first), int(last)))
    out = np.full((len(starts), length), np.nan, dtype=np.float32)
    windows_per_chunk = len(plan) // max(len(starts), 1)
    for rows in _batches(len(plan), batch_size):
        batch = plan[rows]
        windows = np.stack([stream[s:s + length + 1] for _, s, _, _ in batch])
        losses = window_losses(model, torch.from_numpy(windows.astype(np.int64)), vocab_size).numpy()
        for (row, s, first, last), loss in zip(batch, losses):
            # Window target position p is stream target s + 1 + p; chunk target position is that - c - 1.
            offset = s - int(starts[row])
            out[row, first + offset:last + offset] = loss[first:last]
        if progress is not None:
            progress(len(batch) / windows_per_chunk, windows.shape[0] * length)
    assert not np.isnan(out).any(), "sliding windows left a target unscored"
    return out
