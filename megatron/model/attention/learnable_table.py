"""The strategies for a learnable per-distance bias table that needs a gradient: the bias is a
constant to the fused kernels and the table's gradient is computed on the side
(megatron/model/attention/table_gradient.py), instead of a mask that requires a gradient sending SDPA to its
unfused math kernel. One variant of each layout the table can take: `sdpa`'s mask, the Toeplitz
row, the `blocked` path's gathered blocks; and for a learnable bias with a learnable weight
(kerple_bias_weight), the Toeplitz rows of both with the softmax written out a block at a time
(megatron/model/attention/weighted_table_attention.py)."""
import torch

from megatron.model.attention.blocked import Blocked
from megatron.model.attention.sdpa import Sdpa, in_dtype_of, sdpa_bytes
from megatron.model.attention.toeplitz import STRIDED_ROWS, Toeplitz, ToeplitzWrittenOut
from megatron.model.attention.table_gradient import attend_with_table, gradient_block
from megatron.model.attention.weighted_table_attention import WeightedTableAttention


# The table gradient: for a learnable per-distance bias table, with gradients; it differentiates neither a
# weight nor per-token terms, and runs without attention dropout.
TABLE_GRADIENT_REQUIRES = frozenset({"gradients", "bias_table", "bias_gradient"})
TABLE_GRADIENT_HANDLES = TABLE_GRADIENT_REQUIRES | {"cpu", "cpu_gradients", "scattered_positions", "documents",
                                                    "window", "sink"}  # the sink on CPU (table_gradient.py)


def gradient_blocks_bytes(inputs, keys: int) -> int:
    """The backward pass's two fp32 [b, H, gradient_block, keys] tensors at a time."""
    run = inputs.run
    return 2 * run.batch * run.heads * min(gradient_block(run.head_dim), run.length) * keys * 4


class SdpaTableGradient(Sdpa):
    name = "sdpa_table_gradient"
    table_grad = True

    def __init__(self, pe, positions, *, bias_table, **common):
        super().__init__(pe, positions, bias_table=bias_table, **common)
        self.bias_table = bias_table

    def mask_table(self, bias_table):
        return bias_table.detach()  # a constant to the fused kernels

    requires, handles = TABLE_GRADIENT_REQUIRES, TABLE_GRADIENT_HANDLES

    @classmethod
    def memory_bytes(cls, inputs):
        run = inputs.run
        return sdpa_bytes(length=run.length, heads=run.heads, batch=run.batch,
                          element_size=run.element_size, pairwise_bytes=0, writes_scores=False,
                          needs_grad=run.needs_grad, mask_rows=inputs.mask_rows)

    def attend(self, q, k, v, dropout_p):
        return attend_with_table(q, k, v, self.bias_table, self.positions, self.positions, None,
                                 in_dtype_of(self.mask, q), causal=True, sink=self.sink)


class ToeplitzTableGradient(Toeplitz):
    name = "toeplitz_table_gradient"
    table_grad = True

    requires = TABLE_GRADIENT_REQUIRES | Toeplitz.requires
    handles = STRIDED_ROWS | TABLE_GRADIENT_REQUIRES | {"cpu_gradients", "sink"}

    @classmethod
    def memory_bytes(cls, inputs):
        """Toeplitz's, the contiguous copies attend_with_table makes of a block's q, k and v (at most
        three q-sized tensors), and the backward's gradient blocks."""
        return super().memory_bytes(inputs) + 3 * inputs.qkv_bytes + gradient_blocks_bytes(inputs, inputs.run.length)

    def attend_block(self, q, k, v, mask, q_positions, k_positions):
        return attend_with_table(q, k, v, self.bias_table, q_positions, k_positions, None, mask, reversed_keys=True,
                                 sink=self.sink)


class BlockedTableGradient(Blocked):
    name = "blocked_table_gradient"
    table_grad = True

    requires, handles = TABLE_GRADIENT_REQUIRES, TABLE_GRADIENT_HANDLES

    @classmethod
    def memory_bytes(cls, inputs):
        """Per block, the visibility (17 a pair), the mask gathered from the table (int64 distance and
        the masked terms, 8 + e H a pair; per row with documents, with their visibility), and the
        backward's gradient blocks."""
        run = inputs.run
        block = min(run.block_size, run.length)
        per_pair = 17 + 8 + (run.element_size * run.heads + 2) * inputs.mask_rows
        return block * run.length * per_pair + gradient_blocks_bytes(inputs, run.length)

    def attend(self, q, k, v, dropout_p):
        # Saves only views of q, k, v and each block's output: no checkpoint needed.
        length = q.shape[2]
        outputs = []
        for start in range(0, length, self.block_size):
            end = min(start + self.block_size, length)
            q_positions, k_positions = self.positions[start:end], self.positions[:end]
            allowed = self.visible(slice(start, end), slice(0, end))
            outputs.append(attend_with_table(q[:, :, start:end], k[:, :, :end], v[:, :, :end], self.bias_table,
                                             q_positions, k_positions, allowed, sink=self.sink))
        return torch.cat(outputs, dim=2)


class ToeplitzWeightedTableGradient(ToeplitzWrittenOut):
    """A learnable bias and weight (kerple_bias_weight) in training at consecutive positions: both read as
    strided rows, the softmax written out a block of queries at a time, the backward recomputing each
    block (weighted_table_attention.py). O(b * H * block * L) at a time, nothing [L, L] kept."""
    name, path = "toeplitz_weighted_table_gradient", "blocked"
    table_grad = True

    def __init__(self, pe, positions, *, bias_table, weight_table, **common):
        super().__init__(pe, positions, bias_table=bias_table, weight_table=weight_table, **common)
        self.bias_table, self.weight_table = bias_table, weight_table

    requires = TABLE_GRADIENT_REQUIRES | ToeplitzWrittenOut.requires  # (`toeplitz_written_out`: the forward alone)
    handles = STRIDED_ROWS | TABLE_GRADIENT_REQUIRES | {"weight", "cpu_gradients", "sink", "sink_off_cpu"}

    @classmethod
    def memory_bytes(cls, inputs):
        """The forward's (toeplitz_written_out), and the backward's four [b, H, block, L] tensors (the raw
        scores, P, dS and dS times the raw scores) in fp32 or wider beside the gradients of q, k and v."""
        run = inputs.run
        element = max(run.element_size, 4)
        block = min(gradient_block(run.head_dim), run.length)
        return (super().memory_bytes(inputs) + 3 * inputs.qkv_bytes * element // run.element_size
                + 4 * run.batch * run.heads * block * run.length * element)

    def attend(self, q, k, v, dropout_p):
        return WeightedTableAttention.apply(q, k.flip(2), v.flip(2), self.bias_table, self.weight_table,
                                            self.bias_row, self.weight_row, self.positions, self.sink)
