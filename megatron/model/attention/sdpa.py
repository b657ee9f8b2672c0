"""The `sdpa` path: the score terms written out once per forward as one [1, H, L, L] additive mask
(or, for a method with a weight, the softmax written out), and `scaled_dot_product_attention`'s
fused kernels. The reference path, and the fastest where its L x L tensors fit."""
import torch
import torch.nn.functional as F

from megatron.model.attention import cpu_flash
from megatron.model.attention.masks import (additive_mask, distance_mask, fused_mask,
                                            same_document, token_term_differences)
from megatron.model.attention.sink import flash_with_sink
from megatron.model.attention.strategy import AttentionPlan
from megatron.model.attention.written_out import WRITTEN_OUT, attend_written_out


def sdpa_bytes(*, length: int, heads: int, batch: int, element_size: int, pairwise_bytes: int,
               writes_scores: bool, needs_grad: bool, mask_rows: int = 1) -> int:
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
      backward, one being made).

    `mask_rows`: b when packed documents are masked (reset-attention-mask), each row with its own
    mask (and, for per-row positions, its own terms); else 1, one mask shared by the rows."""
    per_pair = element_size * heads * mask_rows
    if pairwise_bytes:
        per_pair += (pairwise_bytes + 17 + element_size * heads) * mask_rows
    if mask_rows > 1:
        per_pair += 2 * mask_rows  # the rows' same-document visibility and its negation (bool)
    if writes_scores:
        per_pair += written_scores_bytes(batch=batch, heads=heads, element_size=element_size, needs_grad=needs_grad)
    return length * length * per_pair


def written_scores_bytes(*, batch: int, heads: int, element_size: int, needs_grad: bool) -> int:
    """Per (query, key) pair: the written-out softmax's [b, H, q, k] scores in fp32 or wider
    (written_out.py, or SDPA's math kernel), two alive at once without gradients, three with."""
    return batch * heads * max(element_size, 4) * (3 if needs_grad else 2)


def token_terms_sdpa_bytes(inputs, writes_scores: bool) -> int:
    """Bytes of the `sdpa` path for per-token terms (fox): the shared causal mask [1, H | 1, L, L]
    (e H, or e without other terms) and per layer, per (query, key) pair of each row, the fp32
    differences F_i - F_j [b, H, L, L] and the mask made from them in the compute dtype (b H (4 + e));
    with gradients the scores SDPA's math kernel writes out (the mask needs a gradient): the batch
    matters here, as the mask is each row's own."""
    run = inputs.run
    shared = run.element_size * (run.heads if inputs.channels & {"bias_table", "query_terms"} else 1) * inputs.mask_rows
    per_pair = shared + run.batch * run.heads * (4 + run.element_size)
    if inputs.has("query_terms"):
        per_pair += inputs.pairwise_bytes + 17 + run.element_size * run.heads
    if writes_scores:
        per_pair += written_scores_bytes(batch=run.batch, heads=run.heads, element_size=run.element_size,
                                         needs_grad=run.needs_grad)
    return run.length * run.length * per_pair


def attend_masked(q, k, v, mask, dropout_p):
    """Attention of the `sdpa` path: a square [1, H | 1, s, s] additive mask (None: plain causal)."""
    if mask is not None and q.device.type == "cpu" and dropout_p == 0 and not mask.requires_grad:
        return cpu_flash.attention(q, k, v, mask, causal=True)[0]  # skips the future key blocks
    # A v narrower than q and k (pope's rotate_qk widens them) would send SDPA to its unfused math kernel,
    # which writes the [L, L] scores (8.4x `none` at 8,192 tokens on CPU): zero columns keep it fused.
    out = F.scaled_dot_product_attention(q, k, cpu_flash.as_wide_as(v, q), attn_mask=mask, dropout_p=dropout_p,
                                         is_causal=mask is None)
    return out[..., :v.shape[-1]]


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
        every = slice(None)
        if not self.distance_only:
            self.mask = additive_mask(self.pairwise(every, every)[0], self.visible(every, every), dtype)
        elif bias_table is not None or window is not None or self.documents is not None:
            self.mask = distance_mask(self.mask_table(bias_table), positions, window, dtype)
            if self.documents is not None:  # [b, H | 1, s, s]: each row's own documents
                self.mask = self.mask.masked_fill(~same_document(self.documents, every, every), float("-inf"))
        if "token_terms" in pe.channels and self.mask is None:  # each layer adds its F_i - F_j to a causal mask
            self.mask = distance_mask(None, positions, window, dtype)

    def mask_table(self, bias_table):
        """The table the mask is built from (differentiable: SDPA's math kernel takes its gradient)."""
        return bias_table

    # Not a weight (SDPA cannot multiply the scores) nor a score rewrite (its fused kernels never write
    # the score matrix out).
    handles = frozenset({"cpu", "query_terms", "token_terms", "bias_table", "bias_gradient", "gradients",
                         "cpu_gradients", "dropout", "scattered_positions", "documents", "window"})

    @classmethod
    def memory_bytes(cls, inputs):
        run = inputs.run
        if not (inputs.has_terms or run.windowed or run.documents):
            return 0  # is_causal: no mask at all
        if inputs.has("token_terms"):
            return token_terms_sdpa_bytes(inputs, cls.mask_needs_grad(inputs))
        return sdpa_bytes(length=run.length, heads=run.heads if inputs.has_terms else 1, batch=run.batch,
                          element_size=run.element_size,
                          pairwise_bytes=inputs.pairwise_bytes if inputs.has("query_terms") else 0,
                          writes_scores=cls.mask_needs_grad(inputs), needs_grad=run.needs_grad,
                          mask_rows=inputs.mask_rows)

    @classmethod
    def mask_needs_grad(cls, inputs) -> bool:
        """A mask that needs a gradient sends SDPA to its math kernel, which writes the scores out."""
        return inputs.run.needs_grad and (inputs.has("bias_gradient") or inputs.has("token_terms"))

    def attend(self, q, k, v, dropout_p):
        mask = in_dtype_of(self.mask, q)
        if self.token_terms is not None:  # this layer's [b, H, L, L] mask: the shared one plus F_i - F_j
            everything = slice(None)
            mask = fused_mask(mask + token_term_differences(self.token_terms, everything, everything).to(q.dtype))
        return attend_masked(q, k, v, mask, dropout_p)


class SdpaSink(Sdpa):
    """`sdpa`'s mask (or none: causal attention) with a learnable sink, on CPU: torch's flash kernel called directly,
    which keeps the log-sum-exp the sink rescales by, and its own backward run from the rescaled output (sink.py).
    Off the CPU SDPA returns no log-sum-exp: `sdpa_written_out` takes the sink there."""
    name = "sdpa_sink"

    requires = frozenset({"sink", "cpu"})
    # Sdpa's, but a mask that needs a gradient (the math kernel's), per-token terms (a mask per layer) or dropout.
    handles = frozenset({"cpu", "sink", "query_terms", "bias_table", "gradients", "cpu_gradients",
                         "scattered_positions", "documents", "window"})

    def attend(self, q, k, v, dropout_p):
        return flash_with_sink(q, k, v, in_dtype_of(self.mask, q), True, self.sink)


class SdpaWrittenOut(AttentionPlan):
    """For a method with a multiplicative weight, which SDPA cannot apply, or one that rewrites the
    score matrix (pe.modify_scores): pe.pairwise's [H, L, L] terms, and the softmax written out per layer
    (written_out.py)."""
    name, path = "sdpa_written_out", "sdpa"
    quadratic_memory = True

    def __init__(self, pe, positions, *, window, **common):
        super().__init__(pe, positions, window=window, **common)
        every = slice(None)
        self.allowed = self.visible(every, every)
        self.bias, self.weight = self.pairwise(every, every)

    handles = WRITTEN_OUT | frozenset({"cpu", "whole_matrix", "query_terms", "token_terms", "bias_table", "weight",
                                       "bias_gradient", "gradients", "cpu_gradients", "dropout",
                                       "scattered_positions", "documents", "window"})  # token terms alone: `sdpa` first

    @classmethod
    def memory_bytes(cls, inputs):
        run = inputs.run
        return sdpa_bytes(length=run.length, heads=run.heads, batch=run.batch,
                          element_size=run.element_size, pairwise_bytes=inputs.pairwise_bytes,
                          writes_scores=True, needs_grad=run.needs_grad, mask_rows=inputs.mask_rows) \
            + inputs.score_edit_bytes(run.length, run.length) \
            + (8 * run.batch * run.heads * run.length ** 2 if inputs.has("token_terms") else 0)  # F_i - F_j, + bias

    def attend(self, q, k, v, dropout_p):
        every = slice(None)
        differences = None if self.token_terms is None else token_term_differences(self.token_terms, every, every)
        return attend_written_out(self.pe, q, k, v, allowed=self.allowed, q_positions=self.positions,
                                  k_positions=self.positions, bias=self.bias, weight=self.weight,
                                  token_differences=differences,
                                  dot_products=self.dot_products(0, k.shape[2]),
                                  sink=self.sink, dropout_p=dropout_p)
