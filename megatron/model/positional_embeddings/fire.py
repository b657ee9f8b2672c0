"""`fire` (Li et al., 2024): b_h(i, j) = MLP(psi(i - j) / psi(max(L, i)))_h with psi(x) = log(|c x| + 1),
an MLP 1 -> width -> ReLU -> H, c learnable, and L = fire_init_L * a learnable multiplier (init 1).
The bias depends on i as well as on d, so it implements `pairwise`; but every query below the threshold
has the normaliser psi(L), so a forward whose positions all lie below it (training at seq-length <= L) has
one per-distance table (distance_tables_at), and attention takes the table paths: in training the table
gradient instead of SDPA's unfused kernel (issue 27: the training step 1.5x `none` before).
"""
from dataclasses import dataclass

import torch
from torch import nn

from .base import PositionalEmbedding, option, positive
from .registry import register

ROW_CHUNK = 16  # query rows per MLP call past the threshold (pairwise)


@register("fire")
class FIRE(PositionalEmbedding):
    channels = frozenset({"query_terms"})

    @dataclass
    class Options:
        fire_mlp_width: int = option(32, "`fire`: hidden width of the bias MLP.", check=positive)
        fire_init_c: float = option(0.1, "`fire`: initial c of psi(x) = log(c x + 1).", init_only=True)
        # Not init-only: every forward computes L = fire_init_L x the learned multiplier.
        fire_init_L: float = option(512.0, "`fire`: initial threshold L (learnable multiplier x 512).")

    def __init__(self, shape, options=None):
        super().__init__(shape, options)
        width = self.options.fire_mlp_width
        self.mlp = nn.Sequential(nn.Linear(1, width), nn.ReLU(), nn.Linear(width, shape.num_heads))
        # Shape [1], not 0-dim: DeepSpeed broadcasts parameters as byte views, which 0-dim tensors refuse.
        self.c = nn.Parameter(torch.tensor([self.options.fire_init_c]))
        self.L_multiplier = nn.Parameter(torch.ones(1))
        self.init_L = self.options.fire_init_L

    def pairwise_bytes(self, needs_grad):
        if not needs_grad:  # the fp32 output [H, q, k]; a chunk of rows' MLP is O(ROW_CHUNK * k), not per pair
            return 4 * self.num_heads
        # With gradients autograd keeps, per pair past the threshold (rows below it read a per-distance
        # table): the MLP's hidden layer before and after ReLU [q, k, width], its output [q, k, H], and
        # about eight [q, k] steps of the normalised distance.
        return 4 * (2 * self.options.fire_mlp_width + self.num_heads + 8)

    def threshold(self) -> torch.Tensor:
        """L = fire_init_L x the learned multiplier, fp32 [1]."""
        return (self.L_multiplier.float() * self.init_L).abs()

    def psi(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log((self.c.float() * x).abs() + 1)

    def mlp_heads(self, normalised: torch.Tensor) -> torch.Tensor:
        """[...] -> [..., H] fp32: the MLP on each normalised distance."""
        return self.mlp(normalised[..., None].to(self.mlp[0].weight.dtype)).float()

    def table_below_threshold(self, length: int) -> torch.Tensor:
        """[length, H]: the bias of a query below the threshold at distances 0..length-1. The 1e-6 keeps
        psi(max(L, 0)) = 0 from dividing when a learned L reaches 0 (as in FIRE's code)."""
        distances = torch.arange(length, device=self.device).float()
        return self.mlp_heads(self.psi(distances) / (self.psi(self.threshold()) + 1e-6))

    def distance_tables_at(self, positions, span):
        if positions.numel() and positions.max() < self.threshold():
            return self.table_below_threshold(span).t(), None
        return None

    def pairwise(self, q_positions, k_positions):
        threshold = self.threshold()
        i, j = q_positions.float(), k_positions.float()
        is_below = i < threshold
        # A query below the threshold has the normaliser psi(L), so along its row the bias is a function of
        # the distance alone: such rows read one MLP output per distance instead of running the MLP on every
        # pair, which was all of FIRE's extra cost per training step (issue 12). Same formula. Rows past it run
        # the MLP ROW_CHUNK rows at a time: its [rows, k, width] hidden layer stays in cache (at 2048 x 2048
        # pairs, 8 heads, width 32, one thread: this pairwise 650 ms with all rows at once, 190 ms in chunks of 16).
        table = self.table_below_threshold(int(q_positions.max() - k_positions.min()) + 1) if is_below.any() else None
        bias = torch.empty(self.num_heads, len(i), len(j), device=i.device)
        for start in range(0, len(i), ROW_CHUNK):
            rows = slice(start, start + ROW_CHUNK)
            distance = (i[rows, None] - j[None, :]).clamp(min=0)  # [rows, k]
            if is_below[rows].all():
                values = table[distance.long()]
            else:
                normaliser = self.psi(torch.maximum(i[rows], threshold))[:, None] + 1e-6
                values = self.mlp_heads(self.psi(distance) / normaliser)
            bias[:, rows] = values.permute(2, 0, 1)  # differentiable: autograd records the copy
        return bias, None
