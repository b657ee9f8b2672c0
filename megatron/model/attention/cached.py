"""The attention of a cached forward (generation with megatron/model/kv_cache.py's storage): s new queries
per row against every cached key, terms from the positional protocol's explicit positions
(`pe.pairwise(q_positions, k_positions)`, `rotate_qk`) and the softmax written out. The cache and its
layers are read through what they expose (positions, real, length, capacity; a layer's `store` and
`store_values`), so this file imports nothing outside the attention folder."""
import torch

from megatron.model.attention.strategy import AttentionPlan
from megatron.model.attention.written_out import DOT_PRODUCTS, attend_written_out, dot_product_channel


def first_visible_slot(start: int, window: int | None) -> int:
    """The first cache slot a forward starting at slot `start` reads (LayerKV.store keeps the rest)."""
    return 0 if window is None else max(0, start - (window - 1))


def per_row(fn, positions: torch.Tensor, *tensors):
    """fn(positions [s], *tensors) for rows [b, ...] with per-row positions [b, s]: one call with
    all rows when they share their positions, else one call per row, concatenated along dim 0."""
    if bool((positions == positions[:1]).all()):
        return fn(positions[0], *tensors)
    results = [fn(positions[r], *(t[r:r + 1] for t in tensors)) for r in range(positions.shape[0])]
    if isinstance(results[0], tuple):
        return tuple(torch.cat(parts) for parts in zip(*results))
    return torch.cat(results)


class CachedPlan:
    """The attention strategy of a cached forward: s new queries per row against every cached key,
    terms from `pe.pairwise` with explicit positions and the softmax written out (written_out.py).
    One instance per cached forward (per positional module), read by every layer."""
    name = "cached_step"

    def __init__(self, pe, start: int, q_positions, bias, weight, allowed, k_positions=None):
        self.pe = pe
        self.k_positions = k_positions    # [b, visible keys]: read by a method that rewrites the scores
        self.start = start                # cache index of the first new token (keys from first_visible_slot)
        self.q_positions = q_positions    # [b, s]
        self.bias, self.weight = bias, weight  # [b or 1, H, s, visible keys] each, or None
        self.allowed = allowed            # bool [b, 1, s, visible keys]
        self.token_terms = None           # g [b, H, s] of one layer (with_layer), or None
        # t [b, H, s] on each new query's row (pe.query_scale: ssmax), from the cached keys it sees, or None
        self.query_scale = pe.query_scale(allowed[:, 0].sum(-1)) if "query_scale" in pe.channels else None
        if self.query_scale is not None and bias is not None:
            self.bias = bias * self.query_scale[..., None]
        self.key_transforms = None        # (w [b, H, s, D], beta [b, H, s]) of one layer (with_layer), or None
        self.sink = None                  # the sink logits s [H] of one layer (with_layer), or None

    # This plan for one layer, holding its own values (AttentionPlan's, an attribute per channel, kept as given:
    # `attend` adds F_i - F_j with the F of the cached keys, applies each new token's key transform to the cached
    # keys (LayerKV.transform_keys), reads a channel's values of the new and the cached keys for its dot products
    # (written_out.DOT_PRODUCTS; running sums where the scores read them: LayerKV.store_values) and applies the sink).
    with_layer = AttentionPlan.with_layer

    def kept(self, channel: str, value):
        return value

    @staticmethod
    def can_run(cache: "KVCache", s: int) -> str | None:
        """Every method runs (the positional protocol's explicit positions); only room can lack."""
        if cache.length + s > cache.capacity:
            return (f"the KV cache holds {cache.capacity} tokens per row and has {cache.length}; "
                    f"{s} more do not fit")
        return None

    @staticmethod
    def memory_bytes(*, batch: int, heads: int, head_dim: int, queries: int, keys: int, capacity: int,
                     element_size: int, pairwise_bytes: int, has_weight: bool, token_terms: bool = False,
                     score_bytes: int = 0) -> int:
        """One layer's cached keys and values (LayerKV: [b, H, capacity, D] twice), and for the forward
        of `queries` new tokens against `keys` cached ones, per (query, key) pair of each row: what
        pe.pairwise allocates (`pairwise_bytes`), the visibility (bool, about 3 with its temporaries)
        and either the masked bias SDPA reads (e H) or, with a weight, the written-out scores in fp32
        or wider (two at once); a method that rewrites the scores (`score_bytes`, pe.score_bytes()) writes them
        out too and adds its own per head. Per-token terms (fox): their F [b, H, capacity] in fp32 beside the
        keys, and per pair F_i - F_j and its sum with the bias (fp32, 8 H). A decoding step (one query) is O(L)."""
        cache = 2 * batch * heads * capacity * head_dim * element_size
        written = has_weight or score_bytes > 0
        per_pair = pairwise_bytes + 3 + (2 * heads * max(element_size, 4) if written else element_size * heads)
        per_pair += heads * score_bytes
        if token_terms:
            cache += batch * heads * capacity * 4
            per_pair += 8 * heads
        return cache + batch * queries * keys * per_pair

    def attend(self, q, k, v, kv: "LayerKV"):
        """q, k, v [b, H, s, D] of the new tokens -> [b, H, s, D]; their keys and values join `kv`."""
        q, k = per_row(lambda positions, q_, k_: self.pe.rotate_qk(q_, k_, positions, positions),
                       self.q_positions, q, k)
        if self.query_scale is not None:
            work = torch.promote_types(q.dtype, torch.float32)  # bf16 up to fp32, fp64 kept
            q = (q.to(work) * self.query_scale[..., None].to(work)).to(q.dtype)
        differences = None
        if self.token_terms is not None:
            # [b, H, s], [b, H, visible keys]
            new, visible = kv.store_values("token_terms", self.token_terms, self.start, running_sum=True)
            differences = new[..., :, None] - visible[..., None, :]
        if self.key_transforms is not None:
            return self.attend_transformed(q, k, v, kv, differences)
        dot_products = None
        if (channel := dot_product_channel(self)) is not None:  # its values at the new queries and the keys they see
            new, seen = kv.store_values(channel, getattr(self, channel), self.start, self.pe.reads_running_sum(channel))
            scores, first = DOT_PRODUCTS[channel].scores, self.start + q.shape[2] - seen.shape[2]

            def dot_products(q_, k_):
                return scores(q_, k_, new, seen, self.start, first)
        keys, values = kv.store(k, v, self.start)
        return attend_written_out(self.pe, q, keys, values, allowed=self.allowed, q_positions=self.q_positions,
                                  k_positions=self.k_positions, bias=self.bias, weight=self.weight,
                                  token_differences=differences, dot_products=dot_products, sink=self.sink)

    def attend_transformed(self, q, k, v, kv, differences):
        """`attend` for a method that transforms the keys (path): one new token at a time, its transform
        H_t applied to every cached key (which then holds H_t ... H_{j+1} k_j), its own key stored as it is,
        and its query read against them: q_t . (cached key j) is PaTH's score. O(L D) per token."""
        w, beta = self.key_transforms
        first = self.start + q.shape[2] - self.allowed.shape[-1]  # the cache slot of the plan's first key column
        outputs = []
        for t in range(q.shape[2]):
            slot = self.start + t
            kv.transform_keys(w[:, :, t], beta[:, :, t], slot)
            keys, values = kv.store(k[:, :, t:t + 1], v[:, :, t:t + 1], slot)  # slots slot + 1 - n .. slot
            columns = slice(slot + 1 - keys.shape[2] - first, slot + 1 - first)

            def row(terms):  # query t's row of [b | 1, H | 1, s, keys] terms, at these keys
                return None if terms is None else terms[:, :, t:t + 1, columns]
            outputs.append(attend_written_out(
                self.pe, q[:, :, t:t + 1], keys, values, allowed=row(self.allowed),
                q_positions=self.q_positions[:, t:t + 1], k_positions=self.k_positions[:, columns], bias=row(self.bias),
                weight=row(self.weight), token_differences=row(differences), sink=self.sink))
        return torch.cat(outputs, dim=2)


def plan_cached(pe, cache: "KVCache", s: int, window: int | None) -> CachedPlan:
    """The plan for the s tokens just appended to `cache` (the last s slots)."""
    end = cache.length
    start = end - s
    first = first_visible_slot(start, window)  # the keys the layers of this plan keep (LayerKV.store)
    q_positions, k_positions, real = cache.positions[:, start:end], cache.positions[:, first:end], cache.real[:, first:end]

    def terms(q_pos, k_pos):  # -> [1, H, s, visible keys] each, or None
        bias, weight = pe.pairwise(q_pos, k_pos)
        return tuple(t if t is None else t[None] for t in (bias, weight))

    if bool((cache.positions[:, first:end] == cache.positions[:1, first:end]).all()):
        bias, weight = terms(q_positions[0], k_positions[0])  # [1, H, s, end]: broadcast over rows
    else:
        pairs = [terms(q, k) for q, k in zip(q_positions, k_positions)]
        bias, weight = (None if parts[0] is None else torch.cat(parts) for parts in zip(*pairs))
    q_index = torch.arange(start, end, device=real.device)[:, None]  # [s, 1]
    k_index = torch.arange(first, end, device=real.device)[None, :]  # [1, visible keys]
    allowed = (k_index <= q_index) & real[:, None, :]                # [b, s, end]
    if window is not None:
        allowed &= q_positions[:, :, None] - k_positions[:, None, :] < window
    allowed |= k_index == q_index  # a padding query sees itself: finite values nobody reads
    return CachedPlan(pe, start, q_positions, bias, weight, allowed[:, None], k_positions)


def attend_cached(q, k, v, plan: CachedPlan, kv: "LayerKV"):
    """q, k, v [b, H, s, D] of the new tokens -> [b, H, s, D]; their keys and values join `kv`."""
    return plan.attend(q, k, v, kv)
