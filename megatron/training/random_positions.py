"""`random-positions` (Ruoss et al., 2023, "Randomized Positional Encodings Boost Length Generalization"):
in training, a micro-batch's positions are sorted draws without replacement from [0, N) instead of
0..L-1, so a model trained at length L has seen positions up to N; evaluation and generation keep
0..L-1. Draws come from torch's CPU generator, whose state checkpoints keep (exact resume).

One draw per micro-batch, shared by its sequences (the paper draws per sequence): attention plans its
tables once per forward for positions the batch shares. Distances between drawn positions are not
consecutive, so the strided CPU path gives way to the gathered `blocked` one for a distance-only method."""
import torch


PERMUTED_UP_TO = 1 << 24  # a permutation of [0, limit) takes 8 * limit bytes: 128 MiB here


def draw_positions(length: int, limit: int, device) -> torch.Tensor:
    """Sorted `length` distinct positions from [0, limit), LongTensor [length] on `device`. Up to
    PERMUTED_UP_TO, a prefix of a random permutation (as every run so far drew them); past it, uniform
    draws with repeats drawn again, in memory that grows with `length`, not `limit` (random-positions:
    1e10 asked torch.randperm for 80 GB)."""
    if limit <= PERMUTED_UP_TO:
        return torch.randperm(limit)[:length].sort().values.to(device)
    chosen = torch.empty(0, dtype=torch.long)
    while len(chosen) < length:
        chosen = torch.unique(torch.cat([chosen, torch.randint(limit, (length - len(chosen),))]))  # each once
    return chosen.sort().values.to(device)
