"""The `flex` path: compiled FlexAttention whose `score_mod` reads the per-distance tables [H, L] (and a
method's per-token terms F [b, H, L], fox), with a block mask for causality and the window; no L x L
tensor. Only for methods whose terms depend on d alone (and on per-token terms). torch has no FlexAttention backward on CPU, so on CPU it runs only without
gradients, and there the compiled kernel is checked against torch's eager math before its numbers
are used (megatron/model/attention/flex_kernel.py)."""
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask

from megatron.model.attention.strategy import AttentionPlan
from megatron.model.attention.flex_kernel import run_flex

MIN_CUDA_HEAD_DIM = 16  # the smallest head dimension torch's CUDA FlexAttention kernel compiles (Flex.can_run)
FLEX_BLOCK = 128  # FlexAttention's tile: the block mask says, per tile, "skip", "full" or "apply mask_mod"


def pad_to_whole_tiles(positions):
    """positions [L] -> [L'] with L' the next multiple of FLEX_BLOCK, padded with the last position.

    The flex path always runs on whole tiles: torch 2.13's compiled CPU FlexAttention returns wrong
    numbers (or NaN) for some lengths that end in a partial tile, e.g. L = 8, 24, 40 with 8-float
    AVX2 vectors (docs/known-issues.md). Padded queries are computed and dropped; padded keys sit
    after every real query, so causality already hides them: the real rows are exact."""
    length = positions.shape[0]
    return F.pad(positions, (0, -length % FLEX_BLOCK), value=int(positions[-1]))


def flex_block_mask(positions, window, span, documents=None):
    """FlexAttention's BlockMask over the whole tiles of `pad_to_whole_tiles(positions)`, for
    causality (by index), the window (by position distance) and, with `documents` [b, s] (packed
    documents masked), keys of the query's own document only: then one mask per row.

    torch's eager `create_block_mask` evaluates the mask on the whole L x L grid (2.5 GB of
    temporaries at L = 16384) and compiling it costs seconds per length, so the tiles are classified
    here from each tile's position (and document) range: O(b (L / 128)^2) memory, no compilation."""
    padded = pad_to_whole_tiles(positions)
    length = padded.shape[0]
    tiles = length // FLEX_BLOCK
    lowest, highest = padded.view(tiles, FLEX_BLOCK).aminmax(dim=1)
    tile = torch.arange(tiles, device=positions.device)
    causal_full, causal_any = tile[None, :] < tile[:, None], tile[None, :] <= tile[:, None]  # [q tile, kv tile]
    limit = span if window is None else window
    window_full = highest[:, None] - lowest[None, :] < limit  # farthest pair of the tile is visible
    window_any = lowest[:, None] - highest[None, :] < limit   # nearest pair is
    full = (causal_full & window_full)[None]                  # [1 | b, q tile, kv tile]
    partial = (causal_any & window_any)[None]
    limit = torch.tensor(limit, device=positions.device)  # a tensor, so the kernel is not specialised on it

    if documents is None:
        def visible(b, h, q_idx, kv_idx):
            return (kv_idx <= q_idx) & (padded[q_idx] - padded[kv_idx] < limit)
    else:
        # Padded tokens join the row's last document: causality hides them from every real query anyway.
        tail = documents[:, -1:].expand(-1, length - documents.shape[1])
        padded_documents = torch.cat([documents, tail], dim=1).contiguous()  # [b, L']
        first, last = padded_documents.view(-1, tiles, FLEX_BLOCK).aminmax(dim=2)  # [b, tiles]: ids ascend
        one_document = (first[:, :, None] == last[:, :, None]) & (first[:, None, :] == last[:, None, :]) & \
            (first[:, :, None] == first[:, None, :])                      # every pair of the two tiles shares it
        shared = (first[:, :, None] <= last[:, None, :]) & (first[:, None, :] <= last[:, :, None])  # some pair does
        full, partial = full & one_document, partial & shared

        def visible(b, h, q_idx, kv_idx):
            return ((kv_idx <= q_idx) & (padded[q_idx] - padded[kv_idx] < limit)
                    & (padded_documents[b, q_idx] == padded_documents[b, kv_idx]))
    partial = partial & ~full

    def ordered(tiles_mask):  # [b | 1, q tile, kv tile] bool -> (counts [b | 1, 1, q], kv tile indices [b | 1, 1, q, kv])
        counts = tiles_mask.sum(dim=-1, dtype=torch.int32)
        indices = tiles_mask.to(torch.int32).argsort(dim=-1, descending=True, stable=True).to(torch.int32)
        return counts[:, None], indices[:, None]

    return BlockMask.from_kv_blocks(*ordered(partial), *ordered(full), BLOCK_SIZE=FLEX_BLOCK, mask_mod=visible,
                                    seq_lengths=(length, length))


class Flex(AttentionPlan):
    name = path = "flex"
    kernel_options = None  # attention-flex-kernel-options, set by plan_attention (CUDA only: flex_kernel.run_flex)

    def __init__(self, pe, positions, *, window, span, bias_table, weight_table, **common):
        super().__init__(pe, positions, window=window, span=span, bias_table=bias_table,
                         weight_table=weight_table, **common)
        self.bias_table, self.weight_table = bias_table, weight_table
        self.block_mask = flex_block_mask(positions, window, span, self.documents)

    # Not a score rewrite, terms of the query position (no per-distance table to read), gradients on CPU
    # (torch's FlexAttention has no CPU backward) or dropout.
    handles = frozenset({"cpu", "token_terms", "bias_table", "weight", "bias_gradient", "gradients",
                         "scattered_positions", "documents", "window"})

    @classmethod
    def refusal(cls, need, inputs):
        """The reasons complete the sentence "attention-impl is 'flex', but ..." (choice.py): a user reads them."""
        run = inputs.run
        if need == "score_rewrite":
            return ("this positional method rewrites the whole score matrix (row by row), which FlexAttention's "
                    "per-entry score_mod cannot express. Set attention-impl to 'blocked', 'sdpa' or 'auto'")
        if need == "query_terms":
            return ("this positional method's bias depends on the query position itself, not only on the "
                    "distance i - j, so it has no per-distance table for FlexAttention to read. Set "
                    "attention-impl to 'blocked', 'sdpa' or 'auto'")
        problem = {"cpu_gradients": "torch's FlexAttention has no backward pass on CPU",
                   "dropout": "FlexAttention does not apply attention dropout"}.get(need)
        if problem is None:
            return super().refusal(need, inputs)
        return (f"{problem} (device {run.device_type}, gradients "
                f"{'needed' if run.needs_grad else 'not needed'}, attention-dropout {run.dropout_p}). Set "
                "attention-impl to 'blocked' or 'auto' for this run, or run on a CUDA device")

    @classmethod
    def can_run(cls, inputs):
        """The needs (strategy.py), then the head size: torch's CUDA FlexAttention kernel refuses head
        dimensions below 16 at compile time (an H200, torch 2.11: "NYI: embedding dimension of the query,
        key, and value must be at least 16"); its CPU kernel takes them."""
        run = inputs.run
        if (reason := super().can_run(inputs)) is not None:
            return reason
        if run.device_type == "cuda" and run.head_dim < MIN_CUDA_HEAD_DIM:
            return (f"torch's CUDA FlexAttention kernel takes head dimensions of at least {MIN_CUDA_HEAD_DIM}, and "
                    f"this model's is {run.head_dim} (hidden-size / num-attention-heads). Set attention-impl "
                    "to 'auto', 'sdpa' or 'blocked', or use fewer, larger heads")
        return None

    @classmethod
    def memory_bytes(cls, inputs):
        """The fp32 tables and the neutral one (3 x 4 H L), the block mask (four int32 arrays of
        (L' / 128)^2 tiles, per row with documents, and their int64 ids) and the zero-padded q, k, v
        and output (L' = L in whole tiles)."""
        run = inputs.run
        padded = run.length + -run.length % FLEX_BLOCK
        tiles = padded // FLEX_BLOCK
        tables = 3 * 4 * run.heads * run.length
        block_mask = 4 * 4 * tiles * tiles * inputs.mask_rows
        documents = 8 * run.batch * padded if run.documents else 0  # the rows' padded document ids
        copies = 2 if run.needs_grad else 1  # F, fp32, padded, and with gradients its clone (attend)
        token_terms = 4 * copies * run.batch * run.heads * padded if inputs.has("token_terms") else 0
        return tables + block_mask + documents + token_terms + 4 * inputs.qkv_bytes * padded // run.length

    def attend(self, q, k, v, dropout_p):
        length = q.shape[2]
        positions = pad_to_whole_tiles(self.positions)
        # Absent terms become neutral tables so every method runs the same compiled score_mod.
        neutral = torch.zeros(q.shape[1], self.span, device=q.device)  # [H, span]
        # fp32 and contiguous whatever the method returns, so the compiled kernel's guards match too.
        bias_table = neutral if self.bias_table is None else self.bias_table.float().contiguous()
        weight_table = neutral + 1 if self.weight_table is None else self.weight_table.float().contiguous()

        def add_score_terms(score, b, h, q_idx, kv_idx):
            # Tables are indexed, not captured scalars: gradients reach the kernel parameters robustly.
            distance = (positions[q_idx] - positions[kv_idx]).clamp(min=0)
            return score * weight_table[h, distance] + bias_table[h, distance]

        score_mod = add_score_terms
        if self.token_terms is not None:
            # Per-token terms (fox): F [b, H, L'] captured, zero-padded like q (padded keys sit after every
            # real query, so causality hides them). Indexed vectors need gradients (torch >= 2.6); F_i - F_j.
            # With gradients, two copies: torch's compiled CUDA FlexAttention refuses to index one tensor that
            # needs gradients twice in a score_mod (an H200, torch 2.11: "Using multiple indexing operations on
            # the same tensor"); a clone is differentiable, so both gradients reach F.
            at_query = F.pad(self.token_terms, (0, positions.shape[0] - length)).contiguous()
            at_key = at_query.clone() if at_query.requires_grad else at_query

            def score_mod(score, b, h, q_idx, kv_idx):
                forget = at_query[b, h, q_idx] - at_key[b, h, kv_idx]
                return add_score_terms(score, b, h, q_idx, kv_idx) + forget

        # Zero-padded to whole tiles (see pad_to_whole_tiles); contiguous, so one memory layout and the
        # compiled kernel is not rebuilt per caller.
        q, k, v = (F.pad(t, (0, 0, 0, positions.shape[0] - length)).contiguous() for t in (q, k, v))
        out = run_flex(q, k, v, score_mod, self.block_mask,  # on CPU: checked against torch's eager math
                       kernel_options=self.kernel_options)
        return out[:, :, :length]
