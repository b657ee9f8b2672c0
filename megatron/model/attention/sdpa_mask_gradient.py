"""The `sdpa_mask_gradient` path: a learnable per-distance table as a differentiable `sdpa` mask, its gradient
computed by SDPA itself, with no side pass (table_gradient.py) and no kernel of this project's own.

On CUDA, SDPA's memory-efficient kernel takes an additive mask that requires a gradient and returns that
gradient (torch >= 2.1), [b, H, L, L] in the compute dtype; autograd then sums it over the batch (the mask's
broadcast) and along the diagonals into the table (distance_mask's Toeplitz view). Whether torch keeps such a
call on the memory-efficient kernel rather than its math kernel, and what it costs against the table gradient
and the `triton` kernel, is what the GPU check's training part measures: so `auto` never takes this path, a
configuration names it (`attention-impl: sdpa_mask_gradient`). On CPU SDPA's math kernel computes it, which
writes the softmax out: correct everywhere, fast nowhere but perhaps CUDA. Forwards without a learnable table
take the `sdpa` path's own strategies."""
from megatron.model.attention.sdpa import Sdpa, sdpa_bytes


class SdpaMaskGradient(Sdpa):
    name = path = "sdpa_mask_gradient"
    requires = frozenset({"gradients", "bias_table", "bias_gradient"})
    handles = frozenset({"cpu", "bias_table", "bias_gradient", "gradients", "cpu_gradients", "dropout",
                         "scattered_positions", "documents", "window"})

    @classmethod
    def memory_bytes(cls, inputs):
        """On CUDA the mask, the gradient SDPA writes for it ([b, H, L, L], e each) and that gradient summed over
        the batch to the mask's shape; elsewhere `sdpa`'s (its math kernel writes the scores out) and the same
        two gradients."""
        run = inputs.run
        mask_gradients = run.length ** 2 * run.element_size * run.heads * (run.batch + inputs.mask_rows)
        if run.device_type != "cuda":
            return Sdpa.memory_bytes(inputs) + mask_gradients
        return sdpa_bytes(length=run.length, heads=run.heads, batch=run.batch,
                          element_size=run.element_size, pairwise_bytes=0, writes_scores=False,
                          needs_grad=run.needs_grad, mask_rows=inputs.mask_rows) + mask_gradients
