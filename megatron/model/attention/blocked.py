"""The `blocked` path's general strategy: queries in blocks of `attention-block-size`, each block
gathering its slice of the terms (from the tables, or from `pe.pairwise` for methods that depend on
i itself) and calling SDPA or the written-out softmax. With gradients each block is recomputed in
the backward pass, so memory stays O(H * block * L) for every method, on every device."""
import torch
from torch.utils.checkpoint import checkpoint

from megatron.model.attention.masks import gather_by_distance, token_term_differences
from megatron.model.attention.sdpa import written_scores_bytes
from megatron.model.attention.strategy import AttentionPlan
from megatron.model.attention.written_out import WRITTEN_OUT, attend_written_out


class Blocked(AttentionPlan):
    name = path = "blocked"
    # Every need there is (the last strategy of its path): listed, so that a need added to needs.py later
    # is handled here only once this class computes it.
    handles = WRITTEN_OUT | frozenset({"cpu", "query_terms", "token_terms", "bias_table", "weight", "bias_gradient",
                                       "gradients", "cpu_gradients", "dropout", "scattered_positions", "documents",
                                       "window"})

    def __init__(self, pe, positions, *, bias_table, weight_table, **common):
        super().__init__(pe, positions, bias_table=bias_table, weight_table=weight_table, **common)
        self.bias_table, self.weight_table = bias_table, weight_table

    @classmethod
    def memory_bytes(cls, inputs):
        """One block's gathered terms at a time (attend_block), per (query, key) pair of the block: 17
        for the visibility (bool, and a window's int64 position differences) and 2 per row for the
        documents' (bool and its negation); with terms, what gathering allocates (the method's
        `pairwise_bytes`: the int64 distance and the fp32 terms) and the masked copy (e H), per row
        with documents; the written-out scores for a weight or a mask that needs a gradient."""
        run = inputs.run
        per_pair = 17 + 2 * inputs.mask_rows
        if inputs.has_terms:
            per_pair += (inputs.pairwise_bytes + run.element_size * run.heads) * inputs.mask_rows
        if inputs.has("token_terms"):  # the block's F_i - F_j [b, H, block, L] in fp32, and with the bias added
            per_pair += run.batch * run.heads * 2 * 4
        if (inputs.channels & (WRITTEN_OUT | {"weight"})
                or (run.needs_grad and inputs.has("bias_gradient"))):
            per_pair += written_scores_bytes(batch=run.batch, heads=run.heads,
                                             element_size=run.element_size, needs_grad=run.needs_grad)
        block = min(run.block_size, run.length)
        return block * run.length * per_pair + inputs.score_edit_bytes(block, run.length)

    def attend(self, q, k, v, dropout_p):
        length = q.shape[2]
        outputs = []
        for start in range(0, length, self.block_size):
            end = min(start + self.block_size, length)
            if torch.is_grad_enabled():
                # Recompute the block in the backward pass instead of saving its [H, block, end]
                # probabilities: otherwise the saved tensors of all blocks add up to O(H * L^2).
                out = checkpoint(self.attend_block, q, k, v, start, end, dropout_p, use_reentrant=False)
            else:
                out = self.attend_block(q, k, v, start, end, dropout_p)
            outputs.append(out)
        return torch.cat(outputs, dim=2)

    def attend_block(self, q, k, v, start, end, dropout_p):
        """Queries start..end-1 against keys 0..end-1 (later keys are masked by causality anyway)."""
        queries, keys = slice(start, end), slice(0, end)
        q_positions, k_positions = self.positions[queries], self.positions[keys]
        if self.distance_only:
            bias = gather_by_distance(self.bias_table, q_positions, k_positions)
            weight = gather_by_distance(self.weight_table, q_positions, k_positions)
        else:
            bias, weight = self.pairwise(queries, keys)
        # F_i - F_j of this block: [b, H, block, end] from two O(L) buffers
        differences = None if self.token_terms is None else token_term_differences(self.token_terms, queries, keys)
        return attend_written_out(self.pe, q[:, :, start:end], k[:, :, :end], v[:, :, :end],
                                  allowed=self.visible(queries, keys), q_positions=q_positions, k_positions=k_positions,
                                  bias=bias, weight=weight, token_differences=differences,
                                  dot_products=self.dot_products(start, end), sink=self.sink,
                                  dropout_p=dropout_p)
