"""`random-positions` (Ruoss et al., 2023, "Randomized Positional Encodings Boost Length Generalization"):
in training, a micro-batch's positions are sorted draws without replacement from [0, N) instead of
0..L-1, so a model trained at length L has seen positions up to N; evaluation and generation keep
0..L-1. Draws come from torch's CPU generator, whose state checkpoints keep (exact resume).

One draw per micro-batch, shared by its sequences (the paper draws per sequence): attention plans its
tables once per forward for positions the batch shares. Distances between drawn positions are not
consecutive, so the strided CPU path gives way to the gathered `blocked` one for a distance-only method."""
import torch


def draw_positions(length: int, limit: int, device) -> torch.Tensor:
    """Sorted `length` distinct positions from [0, limit), LongTensor [length] on `device`."""
    return torch.randperm(limit)[:length].sort().values.to(device)
