"""Sequence parallelism (DeepSpeed-Ulysses): one sequence split over P ranks, attention exact.

Each rank of a sequence-parallel group holds s/P consecutive tokens of every sequence (rank r: tokens
r*s/P .. (r+1)*s/P - 1) and runs the embedding, the MLPs and the output head on them alone. Attention goes
through DeepSpeed's `DistributedAttention`: all-to-alls exchange the sequence shards of q, k and v for head
shards, so each rank attends over the whole sequence with H/P heads (rank r: heads r*H/P .. (r+1)*H/P - 1)
by this project's own strategies, and a last all-to-all brings the output back to sequence shards.

What a positional method gives attention becomes global in that exchange:
- positions (and packed documents' ids) are all-gathered, so rotary, the distance tables, windows and
  document masks are computed at global positions, for the whole sequence (dynamic rotary scalings from
  the global length);
- per-head parameters are read for this rank's heads only (`HeadShard`: the method's tables, pairwise
  terms and query scales sliced by global head), so their gradient is on the rank that owns the head;
- per-token terms (fox, cable) and key transforms (path) are computed from this rank's tokens for every
  head and go through the same all-to-all as q, k and v;
- absolute embeddings are added at the shard's global positions.
A method that mixes heads (dape: an MLP or convolution across the heads of each score) cannot run on H/P
heads; `sequence_parallel_problem` (head_split.py) says so, and the config refuses it before anything runs.

Gradients: each rank's loss is its share of the sequence's loss (its tokens' sum over the whole
sequence's count), the all-to-alls' backward carries every rank's share to the heads that made it, and
DeepSpeed's engine sums the gradients over the sequence-parallel group (and averages over data-parallel
replicas), given the groups (megatron/parallel/sequence_groups.py)."""
import torch
import torch.distributed as dist
from deepspeed.sequence.layer import DistributedAttention, _SeqAllToAll

from megatron.model.attention import plan_attention
from megatron.model.attention.cached import per_row
from megatron.model.gpt_model import shared_and_row_positions

# DistributedAttention's layout for q, k, v here: [b, s, H, D] (batch first), heads scattered, sequence gathered.
BATCH_DIM, HEAD_DIM, SEQUENCE_DIM = 0, 2, 1


class HeadShard:
    """Positional module `pe` as one rank of a sequence-parallel group sees it: its per-head terms for heads
    [first, first + count) only (tables, pairwise terms, query scales sliced along the head dimension);
    everything else is `pe`'s own. Not a module: the parameters stay `pe`'s, and a slice's gradient flows
    into them."""

    def __init__(self, pe, first: int, count: int):
        self._pe, self._heads, self.num_heads = pe, slice(first, first + count), count

    def __getattr__(self, name):
        return getattr(self._pe, name)

    def _slice(self, tables, dim: int):
        return None if tables is None else tuple(None if t is None else t.narrow(
            dim, self._heads.start, self.num_heads) for t in tables)

    def distance_tables(self, length):
        return self._slice(self._pe.distance_tables(length), 0)  # [H, length]

    def distance_tables_at(self, positions, span):
        return self._slice(self._pe.distance_tables_at(positions, span), 0)

    def pairwise(self, q_positions, k_positions):
        return self._slice(self._pe.pairwise(q_positions, k_positions), 0)  # [H, q, k]

    def query_scale(self, keys_seen):
        scale = self._pe.query_scale(keys_seen)  # [b | 1, H, s]
        return None if scale is None else scale[:, self._heads]

    def rotate_qk(self, q, k, q_positions, k_positions):
        """`pe.rotate_qk` of this rank's heads q, k [b, H/P, s, D], placed among zero heads at their global index,
        so that a per-head parameter of the transform (pope's phase bias, head_scale's scale) meets its own head."""
        def spread(x):
            return torch.nn.functional.pad(x, (0, 0, 0, 0, self._heads.start, self._pe.num_heads - self._heads.stop))
        q, k = self._pe.rotate_qk(spread(q), spread(k), q_positions, k_positions)
        return q[:, self._heads], k[:, self._heads]


def exchange_heads(x: torch.Tensor, group) -> torch.Tensor:
    """[b, H, s/P, ...] sequence shard, every head -> [b, H/P, s, ...] this rank's heads, the whole sequence
    (the all-to-all of q, k and v, differentiable)."""
    extra = x.dim() == 3
    y = (x[..., None] if extra else x).transpose(1, 2)  # [b, s/P, H, D]
    y = _SeqAllToAll.apply(group, y.contiguous(), HEAD_DIM, SEQUENCE_DIM, BATCH_DIM).transpose(1, 2)
    return y[..., 0] if extra else y


class SequenceParallelPlan:
    """A layer's attention plan under sequence parallelism: `inner` is the plan of this rank's heads over the
    whole sequence; the layer hands it its sequence shards (SelfAttention's calls: its own values,
    rotate, attend), and it exchanges them around `inner`."""

    def __init__(self, inner, pe, group):
        self.inner, self.pe, self.group = inner, pe, group  # pe: the whole module (its terms for every head)
        self.distributed = DistributedAttention(self._local, group, scatter_idx=HEAD_DIM, gather_idx=SEQUENCE_DIM)

    def _with(self, inner):
        return SequenceParallelPlan(inner, self.pe, self.group)

    def with_layer(self, values: dict):
        """The layer's own values of this rank's heads over the whole sequence: per-token values (tensors, or
        tuples of tensors, [b, H, s/P, ...]) exchanged with q, k and v; per-head ones ([H]: the sink logits)
        narrowed to this rank's heads (the HeadShard of `inner`)."""
        shard = self.inner.pe

        def of_this_rank(value):
            if isinstance(value, tuple):
                return tuple(of_this_rank(v) for v in value)
            if value.dim() == 1:
                return value.narrow(0, shard._heads.start, shard.num_heads)
            return exchange_heads(value, self.group)
        given = {channel: of_this_rank(value) for channel, value in values.items() if value is not None}
        return self._with(self.inner.with_layer(given)) if given else self

    def rotate(self, q, k):
        return q, k  # at global positions, after the exchange (_local)

    def _local(self, q, k, v, dropout_p):  # [b, s, H/P, D] each
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        q, k = self.inner.rotate(q, k)
        return self.inner.attend(q, k, v, dropout_p).transpose(1, 2)

    def attend(self, q, k, v, dropout_p: float):
        """q, k, v [b, H, s/P, D] (this rank's tokens) -> [b, H, s/P, D]."""
        q, k, v = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        return self.distributed(q, k, v, BATCH_DIM, None, dropout_p).transpose(1, 2)

    def __repr__(self):
        return f"SequenceParallel({self.inner!r}, ranks={dist.get_world_size(self.group)})"


class SequenceParallel:
    """The model's side of a sequence-parallel group: which shard this rank holds, and its forward."""

    def __init__(self, group):
        self.group = group
        self.size, self.rank = dist.get_world_size(group), dist.get_rank(group)

    def gather(self, t: torch.Tensor, dim: int) -> torch.Tensor:
        """Every rank's shard of `t` (no gradient: positions and document ids), concatenated along `dim`."""
        parts = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(parts, t.contiguous(), group=self.group)
        return torch.cat(parts, dim=dim)

    def forward(self, model, tokens, position_ids, document_ids, labels=None, vocab_size=None):
        """GPTModel.forward on this rank's shard: tokens [b, s/P] -> logits [b, s/P, vocab]. `position_ids`
        ([s/P] or [b, s/P]) and `document_ids` ([b, s/P]) are the shard's, as a loader slices them; with the
        shard's `labels` [b, s/P], its tokens' losses [b, s/P] instead of logits, as GPTModel.forward."""
        b, local = tokens.shape
        s = local * self.size
        if position_ids is not None:
            position_ids = self.gather(position_ids, dim=position_ids.dim() - 1)
        if document_ids is not None:
            document_ids = self.gather(document_ids, dim=1)
        positions, row_positions = shared_and_row_positions(position_ids, document_ids, b, s, tokens.device)
        mine = slice(self.rank * local, (self.rank + 1) * local)
        x = model.word_embeddings(tokens)
        add = model.pos_embs[0].add_to_embeddings
        x = add(x, positions[mine]) if row_positions is None else per_row(
            lambda p, x_: add(x_, p), row_positions[:, mine], x)
        x = model.embedding_dropout(x)
        heads = model.config.num_attention_heads // self.size
        attention = model.attention_config
        plans = [SequenceParallelPlan(plan_attention(
            HeadShard(pe, self.rank * heads, heads), positions,
            attention.run(window=window, training=model.training, dtype=model.compute_dtype(), batch=b,
                          documents=document_ids, row_positions=row_positions, sink=model.config.attention_sink)),
            pe, self.group)
            for pe, window in zip(model.pos_embs, model.windows)]
        return model._layers_and_head(x, plans, [None] * len(model.layers), labels, vocab_size)
