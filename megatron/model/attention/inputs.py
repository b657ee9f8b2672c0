"""What decides how one forward attends: the method's kind, the device, the sizes; never a layer."""
from dataclasses import dataclass

import torch

from megatron.model.attention.householder import CHUNK
from megatron.model.attention.masks import consecutive


@dataclass(frozen=True)
class AttentionInputs:
    """Everything a strategy's `can_run` and `memory_bytes` read, and all `auto` decides from."""
    device_type: str        # "cpu" | "cuda" | ...
    length: int             # tokens per sequence
    heads: int              # the positional method's heads (the model's)
    head_dim: int
    batch: int              # sequences per forward
    element_size: int       # bytes of one element of q, k and v (the compute dtype)
    block_size: int         # attention-block-size
    distance_only: bool     # terms depend on i - j alone (tables), not on i itself (pe.pairwise)
    has_bias: bool          # a distance-only method's bias table (pe.pairwise's terms count by has_terms)
    has_weight: bool        # a multiplicative score weight (kerple_bias_weight), which SDPA cannot apply
    learnable_bias: bool    # the bias takes a gradient: a table that requires one, or pairwise parameters
    pairwise_bytes: int     # pe.pairwise_bytes(needs_grad): what pe.pairwise allocates per (query, key) pair
    windowed: bool          # attention-window is set
    consecutive: bool       # positions p0, p0 + 1, ... (the usual case)
    needs_grad: bool
    dropout_p: float
    documents: bool = False  # packed documents are masked (reset-attention-mask): each row has its own mask
    token_terms: bool = False  # per-token terms F_i - F_j from the hidden states (pe.token_terms: fox), per layer
    modifies_scores: bool = False  # pe.modify_scores rewrites the written-out score matrix (cope, dape)
    score_bytes: int = 0           # pe.score_bytes(): what it allocates per (query, key) pair, head and sequence
    whole_matrix: bool = False     # pe.reads_whole_matrix: its score edit needs the forward's whole matrix at once
    replaces_softmax: bool = False  # pe.normalise gives the weights in place of the softmax (stickbreaking)
    stick_breaking: bool = False    # ... and they are stick-breaking's exactly (pe.stick_breaking_options)
    key_transforms: bool = False    # pe.key_transforms: Householder products between key and query (path), per layer

    @property
    def has_terms(self) -> bool:
        """Anything beyond causal attention: a bias or weight, terms pe.pairwise builds, per-token terms or
        a rewrite of the scores."""
        return (not self.distance_only or self.has_bias or self.has_weight or self.token_terms
                or self.modifies_scores or self.replaces_softmax or self.key_transforms)

    @property
    def mask_rows(self) -> int:
        """How many rows a mask built for this forward has: one per sequence with documents, else one shared."""
        return self.batch if self.documents else 1

    def score_edit_bytes(self, queries: int, keys: int) -> int:
        """What pe.modify_scores, pe.normalise or the key transforms allocate for `queries` x `keys` pairs of
        every head and sequence (0 without): the method's score_bytes, and for key transforms what
        householder.py's chunks keep per (query, key) pair for the backward (the carried query once per chunk,
        D / CHUNK numbers, and about 8 more; without gradients 3), in fp32 or wider. Measured: 42 and 13 bytes
        a pair (peak RSS rise of one call, 512 queries x 4,096 keys, 4 heads of 64 dims, fp32), against 40
        and 12 from this count."""
        per_pair = self.score_bytes if (self.modifies_scores or self.replaces_softmax) else 0
        if self.key_transforms:
            kept = self.head_dim // CHUNK + 8 if self.needs_grad else 3
            per_pair += kept * max(self.element_size, 4)
        return self.batch * self.heads * queries * keys * per_pair

    @property
    def qkv_bytes(self) -> int:
        """Bytes of one of q, k and v: what a strategy's copy of one of them costs."""
        return self.batch * self.heads * self.length * self.head_dim * self.element_size

    @classmethod
    def describe(cls, pe, positions: torch.Tensor, bias_table, weight_table, *, window: int | None,
                 block_size: int, needs_grad: bool, dropout_p: float, dtype: torch.dtype,
                 batch: int, documents: bool = False) -> "AttentionInputs":
        """From the positional module and the tables it returned for this forward (None, None for a
        method that is not distance-only)."""
        by_distance = terms_by_distance(pe, bias_table)
        learnable = (bias_table.requires_grad if by_distance and bias_table is not None
                     else not by_distance and any(p.requires_grad for p in pe.parameters()))
        return cls(device_type=positions.device.type, length=positions.shape[0], heads=pe.num_heads,
                   head_dim=pe.head_dim, batch=batch, element_size=dtype.itemsize, block_size=block_size,
                   distance_only=by_distance, has_bias=bias_table is not None,
                   has_weight=has_weight(pe, positions, weight_table, by_distance), learnable_bias=learnable,
                   pairwise_bytes=pe.pairwise_bytes(needs_grad), windowed=window is not None,
                   consecutive=consecutive(positions), needs_grad=needs_grad, dropout_p=dropout_p,
                   documents=documents, token_terms=pe.uses_token_terms, modifies_scores=pe.modifies_scores,
                   score_bytes=pe.score_bytes(), whole_matrix=pe.reads_whole_matrix,
                   replaces_softmax=pe.replaces_softmax, key_transforms=pe.uses_key_transforms,
                   stick_breaking=pe.replaces_softmax and pe.stick_breaking_options() is not None)


def terms_by_distance(pe, bias_table) -> bool:
    """This forward's terms depend on i - j alone: the method's always do, or it gave a table for these
    positions (pe.distance_tables_at: fire below its threshold)."""
    return pe.distance_only or bias_table is not None


def has_weight(pe, positions, weight_table, by_distance: bool) -> bool:
    """A forward whose terms depend on the distance alone has a weight when the method returns a weight
    table; a method whose terms pe.pairwise builds is asked for one pair (so no path ever drops a weight
    it did not expect)."""
    if by_distance:
        return weight_table is not None
    with torch.no_grad():
        return pe.pairwise(positions[:1], positions[:1])[1] is not None
