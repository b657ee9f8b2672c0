"""A KV cache for generation: every layer's keys and values so far, and each row's positions.

`GPTModel.forward(tokens, cache=cache, padding=...)` runs `tokens` [b, s] as the continuation of what
the cache holds: the new queries attend to the cached keys plus their own, through the positional
protocol's explicit positions (`pairwise(q_positions, k_positions)`, `rotate_qk`,
`add_to_embeddings`), so the cache works for every method and past the training length; memory
is O(L) per layer (the keys and values, plus [H, s, L] score terms for s new queries).

Batched prompts of different lengths are left-padded. Each row counts positions over its own tokens
only (0 at its first real token), so every row gets the numbers of a forward of that row alone, also
for the methods that read absolute positions (learned, sinusoidal, rotary's angles, fire's query
position). Padding slots are never visible as keys; as queries they see themselves only, which
keeps their (unused) values finite. Rows whose positions differ call the protocol once each.

This file keeps the storage; the attention of a cached forward (its plan and step) is
megatron/model/attention/cached.py.
"""
import torch

from megatron.errors import NeoXArgsError
from megatron.model.attention.cached import CachedPlan


class LayerKV:
    """One layer's cached keys and values, [b, H, capacity, D] each, allocated on first use (then
    they take the dtype and device of the model's keys). A windowed layer (attention-window W) keeps
    only the last W - 1 slots between forwards: no query of a later forward can see an older key (past
    its first real token a row's positions rise by one per slot), so its memory is O(W), not O(L)."""

    def __init__(self, capacity: int, window: int | None = None):
        self.capacity, self.window, self.keys, self.values = capacity, window, None, None
        # {channel: a layer value per cached slot, [b, H, slots, ...]}: as given, or its running sum in fp32 (or
        # wider): fox's F of its per-token terms, wall's P of its channel decays (store_values)
        self.per_token = {}

    def store_values(self, channel: str, g, start: int, running_sum: bool):
        """A layer value of `channel` per token, g [b, H, s, ...], of slots start.. -> (what the layer keeps of
        those slots [b, H, s, ...], and of the slots a query of them can see, as `store` keeps the keys): g itself,
        or with `running_sum` its running sum F over the tokens in fp32 or wider, run on from the last cached
        slot, so a decoding step appends one value and F_i - F_j equals a full forward's. Kept like the keys
        (O(W) windowed)."""
        if running_sum:
            g = g.to(torch.promote_types(g.dtype, torch.float32))
        kept = self.per_token.get(channel)
        if self.window is not None:
            before = 0 if kept is None or kept.shape[2] == 0 else kept[:, :, -1:]
            new = g.cumsum(dim=2) + before if running_sum else g
            visible = new if kept is None else torch.cat([kept, new], dim=2)
            self.per_token[channel] = visible[:, :, visible.shape[2] - min(self.window - 1, visible.shape[2]):]
            return new, visible
        if kept is None:
            kept = self.per_token[channel] = g.new_zeros(*g.shape[:2], self.capacity, *g.shape[3:])
        end = start + g.shape[2]
        new = g.cumsum(dim=2) + (kept[:, :, start - 1:start] if start > 0 else 0) if running_sum else g
        kept[:, :, start:end] = new
        return new, kept[:, :, :end]

    def transform_keys(self, w, beta, start: int):
        """PaTH (pe.key_transforms): H = I - beta w w^T (w [b, H, D], beta [b, H]) applied in place to every
        cached key before slot `start`, so a cached key j holds H_t ... H_{j+1} k_j after token t's step
        (computed in fp32 or wider, stored in the keys' dtype)."""
        if self.keys is None:
            return
        keys = self.keys if self.window is not None else self.keys[:, :, :start]
        wide = keys.to(torch.promote_types(keys.dtype, torch.float32))
        w, beta = w.to(wide.dtype), beta.to(wide.dtype)
        reach = (wide @ w[..., :, None]) * beta[..., None, None]  # [b, H, slots, 1]
        transformed = (wide - reach * w[:, :, None, :]).to(keys.dtype)
        if self.window is not None:  # a new tensor: the kept keys may be a view of the caller's k
            self.keys = transformed
        else:
            self.keys[:, :, :start] = transformed

    def store(self, k, v, start: int):
        """Write k, v [b, H, s, D] at slots start.. and return the keys and values a query of them can see:
        all slots up to them, or for a windowed layer slots max(0, start - (W - 1)) .. start + s."""
        if self.window is not None:
            keys, values = (k, v) if self.keys is None else (torch.cat([self.keys, k], 2), torch.cat([self.values, v], 2))
            kept = self.window - 1
            self.keys, self.values = keys[:, :, keys.shape[2] - min(kept, keys.shape[2]):], \
                values[:, :, values.shape[2] - min(kept, values.shape[2]):]
            return keys, values
        if self.keys is None:
            self.keys = k.new_empty(*k.shape[:2], self.capacity, k.shape[-1])  # pope's keys are wider than v
            self.values = v.new_empty(*v.shape[:2], self.capacity, v.shape[-1])
        end = start + k.shape[2]
        self.keys[:, :, start:end], self.values[:, :, start:end] = k, v
        return self.keys[:, :, :end], self.values[:, :, :end]


class KVCache:
    def __init__(self, num_layers: int, batch_size: int, capacity: int, device=None, windows=None):
        """Room for `capacity` tokens (padding included) in each of `batch_size` rows; `windows`: each
        layer's attention window (None: every earlier token), default none windowed."""
        self.batch_size, self.capacity, self.length = batch_size, capacity, 0
        self.layers = [LayerKV(capacity, window) for window in (windows or [None] * num_layers)]
        self.positions = torch.zeros(batch_size, capacity, dtype=torch.long, device=device)  # per row
        self.real = torch.zeros(batch_size, capacity, dtype=torch.bool, device=device)  # False: padding

    def append(self, padding: torch.Tensor | None, s: int) -> torch.Tensor:
        """Record s new slots (`padding` [b, s] True for left-padding) -> their positions [b, s]."""
        problem = CachedPlan.can_run(self, s)
        if problem:
            raise NeoXArgsError(f"{problem}. Create it with a larger capacity.")
        real = torch.ones(self.batch_size, s, dtype=torch.bool, device=self.real.device)
        if padding is not None:
            real = ~padding.to(self.real.device)
        seen = self.real[:, :self.length].sum(dim=1, keepdim=True)  # [b, 1] real tokens so far
        positions = (seen + real.cumsum(dim=1) - 1).clamp(min=0)  # padding before a row starts: 0
        end = self.length + s
        self.positions[:, self.length:end], self.real[:, self.length:end] = positions, real
        self.length = end
        return positions
