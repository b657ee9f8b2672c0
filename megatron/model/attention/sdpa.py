"""The `sdpa` path: the score terms written out once per forward as one [1, H, L, L] additive mask
(or, for a method with a weight, the softmax written out), and `scaled_dot_product_attention`'s
fused kernels. The reference path, and the fastest where its L x L tensors fit."""
import torch
import torch.nn.functional as F

from megatron.model import cpu_flash
from megatron.model.attention.masks import additive_mask, allowed_keys, attend_materialised, distance_mask
from megatron.model.attention.strategy import AttentionPlan


def sdpa_bytes(*, length: int, heads: int, batch: int, element_size: int, pairwise_bytes: int,
               writes_scores: bool, needs_grad: bool) -> int:
    """Bytes the `sdpa` strategies materialise for one forward at `length` tokens, counted from what
    they allocate below (per layer: what each layer keeps for its backward is counted once). With
    e = `element_size` of the compute dtype, per (query, key) pair:

    - e H for the mask [1, H, L, L] (H = 1 for a window without terms), held through the forward and
      the backward and shared by the layers. A distance-only method builds nothing else
      (distance_mask; position_ids that are not consecutive gather, about twice that);
    - for a method whose terms `pe.pairwise` builds (one that depends on i itself, or has a weight):
      its `pairwise_bytes`, 17 for the visibility [L, L] (bool, and a window's int64 position
      differences) and e H for the copy the mask is masked from;
    - for the written-out softmax (`writes_scores`: a weight, or a mask that needs a gradient, which
      sends SDPA to its math kernel), the [b, H, L, L] scores in fp32 or wider: two at once without
      gradients (one op's input and output), three with (scores and probabilities kept for the
      backward, one being made)."""
    per_pair = element_size * heads
    if pairwise_bytes:
        per_pair += pairwise_bytes + 17 + element_size * heads
    if writes_scores:
        per_pair += written_scores_bytes(batch=batch, heads=heads, element_size=element_size, needs_grad=needs_grad)
    return length * length * per_pair


def written_scores_bytes(*, batch: int, heads: int, element_size: int, needs_grad: bool) -> int:
    """Per (query, key) pair: the written-out softmax's [b, H, q, k] scores in fp32 or wider
    (attend_materialised, or SDPA's math kernel), two alive at once without gradients, three with."""
    return batch * heads * max(element_size, 4) * (3 if needs_grad else 2)


def attend_masked(q, k, v, mask, dropout_p):
    """Attention of the `sdpa` path: a square [1, H | 1, s, s] additive mask (None: plain causal)."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True)
    if q.device.type == "cpu" and dropout_p == 0 and not mask.requires_grad:
        return cpu_flash.attention(q, k, v, mask, causal=True)[0]  # skips the future key blocks
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p)


def in_dtype_of(mask, q):
    """The plan's mask in q's dtype: itself, or (planned for another dtype) one copy a layer."""
    return mask if mask is None or mask.dtype == q.dtype else mask.to(q.dtype)


class Sdpa(AttentionPlan):
    """The terms as one additive mask, built once per forward and shared by the layers (None without
    terms or window: SDPA's fused causal kernels, nothing L x L)."""
    name = path = "sdpa"
    quadratic_memory = True

    def __init__(self, pe, positions, *, window, dtype, bias_table, weight_table, **common):
        super().__init__(pe, positions, window=window, dtype=dtype, bias_table=bias_table,
                         weight_table=weight_table, **common)
        self.mask = None
        if not pe.distance_only:
            allowed = allowed_keys(positions, positions, torch.arange(positions.shape[0], device=positions.device),
                                   window)
            self.mask = additive_mask(pe.pairwise(positions, positions)[0], allowed, dtype)
        elif bias_table is not None or window is not None:
            self.mask = distance_mask(self.mask_table(bias_table), positions, window, dtype)

    def mask_table(self, bias_table):
        """The table the mask is built from (differentiable: SDPA's math kernel takes its gradient)."""
        return bias_table

    @classmethod
    def can_run(cls, inputs):
        if inputs.has_weight:
            return "SDPA cannot multiply the scores by this method's weight"
        if inputs.modifies_scores:
            return "SDPA's fused kernels never write out the score matrix this method rewrites"
        return None

    @classmethod
    def memory_bytes(cls, inputs):
        if not (inputs.has_terms or inputs.windowed):
            return 0  # is_causal: no mask at all
        return sdpa_bytes(length=inputs.length, heads=inputs.heads if inputs.has_terms else 1, batch=inputs.batch,
                          element_size=inputs.element_size,
                          pairwise_bytes=0 if inputs.distance_only else inputs.pairwise_bytes,
                          writes_scores=cls.mask_needs_grad(inputs), needs_grad=inputs.needs_grad)

    @classmethod
    def mask_needs_grad(cls, inputs) -> bool:
        """A mask that needs a gradient sends SDPA to its math kernel, which writes the scores out."""
        return inputs.needs_grad and inputs.learnable_bias

    def attend(self, q, k, v, dropout_p):
        return attend_masked(q, k, v, in_dtype_of(self.mask, q), dropout_p)


class SdpaWrittenOut(AttentionPlan):
    """For a method with a multiplicative weight, which SDPA cannot apply, or one that rewrites the
    score matrix (pe.modify_scores): pe.pairwise's [H, L, L] terms, and the softmax written out per layer
    (attend_materialised)."""
    name, path = "sdpa_written_out", "sdpa"
    quadratic_memory = True

    def __init__(self, pe, positions, *, window, **common):
        super().__init__(pe, positions, window=window, **common)
        self.allowed = allowed_keys(positions, positions, torch.arange(positions.shape[0], device=positions.device),
                                    window)
        self.bias, self.weight = pe.pairwise(positions, positions)

    @classmethod
    def memory_bytes(cls, inputs):
        return sdpa_bytes(length=inputs.length, heads=inputs.heads, batch=inputs.batch,
                          element_size=inputs.element_size, pairwise_bytes=inputs.pairwise_bytes,
                          writes_scores=True, needs_grad=inputs.needs_grad) \
            + inputs.score_edit_bytes(inputs.length, inputs.length)

    def attend(self, q, k, v, dropout_p):
        return attend_materialised(q, k, v, self.bias, self.weight, self.allowed, dropout_p,
                                   score_edit(self.pe, self.positions, self.positions))


def score_edit(pe, q_positions, k_positions):
    """pe.modify_scores with these positions bound, for attend_materialised; None for a method without one."""
    if not pe.modifies_scores:
        return None
    return lambda scores, bias, q, k, visible: pe.modify_scores(scores, bias, q, k, q_positions, k_positions, visible)
