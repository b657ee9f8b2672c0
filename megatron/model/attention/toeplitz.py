"""The `blocked` path on CPU for a distance-only method at consecutive positions: no term is
materialised. Every (query, key) term is row[h, i - j + L - 1] of one row per head (distance_row);
with the keys in reverse order a query block's terms have strides (1, 1), so each block's mask is a
strided view of that row, handed to torch's CPU flash kernel (cpu_flash.py) with the keys up to the
block's last query. Memory O(H * L); one thread, 8 heads of 32 dims, one sequence: 3.5 / 12 / 45 ms
at L = 512 / 1024 / 2048, against 4.6 / 14 / 46 for causal attention without terms and 5.4 / 18 / 58
for the `sdpa` path's call.

How many queries a call takes (query_block) decides the kernel's own tiles: it splits a call's
queries into tiles of 32 below 192 queries, 64 below 768 and 256 from 768 on, and reads every key
and value once per tile. At 8k-16k tokens 128-query calls (32-query tiles) read the keys 8x as often
as causal attention's 256-query tiles and cost 1.6-1.9x `none` in evaluation (issue 27); calls of
768 queries use 256-query tiles, and the keys they compute past the diagonal (on average 384 per
query, about what causal attention's 512-key tiles compute past it) are few next to the L / 2 the
query sees. One thread, model of 4 layers, 8 heads of 32 dims, L = 8192: 1.16x `none` with 128,
1.03x with 768, 1.06x with 1024."""
import math

import torch

from megatron.model.attention.masks import distance_row, row_view
from megatron.model.attention.sink import flash_with_sink, with_sink
from megatron.model.attention.strategy import AttentionPlan
from megatron.model.attention.weighted_table_attention import FORWARD_BLOCK, weighted_forward

TOEPLITZ_BLOCK = 128  # queries per kernel call (it holds no [block, L] tensor): with gradients, or short
LONG_BLOCK = 768      # ... without gradients from LONG_FROM tokens on: the kernel's 256-query tiles
LONG_FROM = 4096


def query_block(length: int, needs_grad: bool) -> int:
    """Queries per kernel call (module docstring). Training keeps 128: its backward and the table
    gradient were measured with them (megatron/model/attention/table_gradient.py)."""
    return LONG_BLOCK if length >= LONG_FROM and not needs_grad else TOEPLITZ_BLOCK


# What strided views of one row per head (row_view) hold: a per-distance table at consecutive positions, one
# row for the batch (not terms of the query position, per-token terms, dropout, scattered positions or
# each row's documents), within a window or not.
STRIDED_ROWS = frozenset({"cpu", "bias_table", "window"})


class Toeplitz(AttentionPlan):
    name, path = "toeplitz", "blocked"

    def __init__(self, pe, positions, *, window, dtype, bias_table, **common):
        super().__init__(pe, positions, window=window, dtype=dtype, bias_table=bias_table, **common)
        table = bias_table.detach() if self.table_grad else bias_table  # table_grad: its gradient on the side
        self.row = distance_row(table, positions.shape[0], window, dtype, positions.device)  # [H | 1, 2L - 1]
        self.bias_table = bias_table

    requires = frozenset({"cpu"})
    # Gradients of q, k and v; the flash kernel takes none for the mask (ToeplitzTableGradient does) and
    # cannot multiply the scores by a weight.
    handles = STRIDED_ROWS | {"gradients", "cpu_gradients", "sink"}  # the sink: sink.py's FlashWithSink

    @classmethod
    def memory_bytes(cls, inputs):
        """The row [H | 1, 2L - 1], and per call nothing of the terms (a view): the reversed keys and
        values and the blocks' outputs before they are joined, each the size of q."""
        run = inputs.run
        row = (run.heads if inputs.has_terms else 1) * (2 * run.length - 1) * run.element_size
        return row + 3 * inputs.qkv_bytes

    def attend(self, q, k, v, dropout_p):
        length, row = q.shape[2], self.row.to(q.dtype)  # [H, 2L - 1]: a copy only if planned for another dtype
        k_reversed, v_reversed = k.flip(2), v.flip(2)
        k_positions = self.positions.flip(0)
        block = query_block(length, torch.is_grad_enabled())
        outputs = []
        for start in range(0, length, block):
            end = min(start + block, length)
            mask = row_view(row, start, end, length)[None]  # [1, H, queries, keys in reverse order]
            keys = slice(length - end, length)
            outputs.append(self.attend_block(q[:, :, start:end], k_reversed[:, :, keys], v_reversed[:, :, keys],
                                             mask, self.positions[start:end], k_positions[keys]))
        return torch.cat(outputs, dim=2)

    def attend_block(self, q, k, v, mask, q_positions, k_positions):
        return flash_with_sink(q, k, v, mask, False, self.sink)


class ToeplitzWrittenOut(AttentionPlan):
    """The `blocked` path for a distance-only method with a weight (kerple_bias_weight), which the
    flash kernel cannot apply, at consecutive positions without gradients: the softmax written out a
    block of queries at a time (megatron/model/attention/weighted_table_attention.py), the weight and the bias
    read as strided views of one row per head (row_view, keys in reverse order) instead of [H, block, L]
    gathers by an int64 distance index and a visibility mask. One thread, 8 heads of 32 dims, L = 4096:
    1.5x causal attention without terms, against 4.3-5.6x for the gathered blocks (issue 27)."""
    name, path = "toeplitz_written_out", "blocked"

    def __init__(self, pe, positions, *, window, dtype, bias_table, weight_table, **common):
        super().__init__(pe, positions, window=window, dtype=dtype, bias_table=bias_table,
                         weight_table=weight_table, **common)
        length, device = positions.shape[0], positions.device
        compute = torch.promote_types(dtype, torch.float32)  # as written_out.py: fp32, float64 stays
        # Constants (a subclass takes the tables' gradients itself): -inf for future keys and past the window.
        self.bias_row = distance_row(bias_table.detach(), length, window, compute, device)
        weight_row = distance_row(weight_table.detach(), length, window, compute, device)
        self.weight_row = weight_row.masked_fill(weight_row.isneginf(), 0)  # finite, so the bias's -inf decides

    requires = frozenset({"weight", "bias_table"})
    # It keeps nothing for a backward pass (`toeplitz_weighted_table_gradient` does).
    handles = STRIDED_ROWS | {"weight", "bias_gradient", "sink", "sink_off_cpu"}

    @classmethod
    def memory_bytes(cls, inputs):
        """The two rows [H, 2L - 1], the scaled queries, the reversed keys and values and the output (each
        the size of q), the logsumexp [b, H, L], in fp32 or wider; per block the scores [b, H, block, L]."""
        run = inputs.run
        element = max(run.element_size, 4)
        rows = 2 * run.heads * (2 * run.length - 1) * element
        copies = 4 * inputs.qkv_bytes * element // run.element_size
        block = min(FORWARD_BLOCK, run.length)
        return rows + copies + run.batch * run.heads * (1 + block) * run.length * element

    def attend(self, q, k, v, dropout_p):
        out, lse = weighted_forward(q, k.flip(2), v.flip(2), self.bias_row, self.weight_row)
        if self.sink is not None:
            out, _ = with_sink(out, lse, self.sink)
        return out.to(v.dtype)
