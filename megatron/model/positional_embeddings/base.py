"""The protocol every positional method implements, and how a method declares its options.

Attention calls only this protocol and never branches on a method's name. Every protocol method defaults
to "do nothing" (the softmax, for `normalise`). Three are asked of every method: `add_to_embeddings`
(absolute methods), `rotate_qk` (with `rotation_tables` and `rotate` for a rotation by per-position cos/sin
tables, which attention computes once per forward) and `distance_tables` (per-head bias and score weight
over d = i - j, read as O(H * L) tables). The others are channels: a method that uses one names it in its
`channels`, one set of names in the vocabulary the attention strategies speak
(megatron/model/attention/needs.py gives each its refusal phrase), so the planner knows what a forward
needs before any tensor exists. CHANNELS below lists them with the protocol method each one calls;
docs/architecture.md's table is generated from it (tools/docs/channel_table.py). The contracts are the
protocol methods' docstrings.

A channel's terms that come from the hidden states (a `layer` channel of CHANNELS) are a layer's own: such a
method also sets `per_layer`, so the model builds one positional module per layer (megatron/model/gpt_model.py).
A method whose edit reads the scores (score_rewrite, normaliser) may read only row i's visible entries,
unless it declares whole_matrix too.

A method's options are the fields of its `Options` dataclass, each declared with `option(...)`:
default, help text, check and whether it only sets initial values. The config keys, the config
reference and the checkpoint check are all read from these declarations (registry.py). A fact that only
one attention kernel needs (fla's stick-breaking kernel: whether the query's own token takes a share) is
read from these options by that strategy, not asked through the protocol.
"""
import copy
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from torch import nn

try:  # in this project: a user mistake, printed as one paragraph; values quoted short (megatron/quoting.py)
    from megatron.errors import NeoXArgsError as UserMistake
    from megatron.quoting import quote
except ImportError:  # in an exported Hugging Face folder, which carries this package's files alone
    UserMistake, quote = ValueError, repr  # (tools/ckpts/hf_export; transformers skips imports in `try`)


class PositionalEmbeddingError(UserMistake):
    """A positional method was asked for something it cannot do (bad name, option or length); a user
    mistake, so entry points print it without a traceback."""


class OptionError(PositionalEmbeddingError):
    """A bad option value; `key` names the config key, so the config can point at the file and line."""

    def __init__(self, key: str, message: str):
        super().__init__(f"{key.replace('_', '-')}: {message}")
        self.key, self.message = key, message


@dataclass(frozen=True)
class Option:
    help: str                                      # the config reference's text
    check: Callable[[Any], str | None] | None = None  # value -> what is wrong with it, or None
    init_only: bool = False                        # only sets initial values: checkpoints may differ
    per_run: bool = False    # a choice of this run, not of the weights (rotary-scaling): checkpoints may differ
    exclusive: bool = False  # setting it while pos-emb is a method that does not declare it is an error
    label: str | None = None  # a run trained with it set away from its default is named so in results and tables
    # A fine-tune (`finetune: true`) may change it: it shapes no parameter, only how positions map onto them
    # (rotary-emb-base), so extending a model to a longer context may retune it and keep the weights.
    extendable: bool = False


def option(default, help: str, *, check=None, init_only: bool = False, per_run: bool = False,
           exclusive: bool = False, label: str | None = None, extendable: bool = False):
    """One field of a method's `Options`: its config key is the field name (YAML `-` or `_`).

    Options of other methods are ignored by default (NeoX configs set rotary-pct whatever pos-emb is);
    `exclusive` ones are refused there, for options whose silent loss would mislead (rotary-scaling, and
    every option of a method NeoX does not have: no NeoX config sets it for another method). `label`: an
    option that changes what the method's name stands for (path-forget-gate) names the runs trained with it
    set, so their results never share a table row or a result file with the plain method's."""
    metadata = {"help": help, "option": Option(help, check, init_only, per_run, exclusive, label, extendable)}
    if isinstance(default, (list, dict)):
        return field(default_factory=lambda: copy.deepcopy(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def positive(value) -> str | None:
    return None if value > 0 else f"must be a positive integer, got {value}."


def fraction(value) -> str | None:
    return None if 0.0 < value <= 1.0 else f"must lie in (0, 1], got {value}."


@dataclass(frozen=True)
class ModelShape:
    """What the model tells every method about itself."""
    num_heads: int
    head_dim: int
    hidden_size: int | None = None
    max_positions: int | None = None  # max-position-embeddings: rows of a position table
    init_std: float = 0.02            # init-method-std, for tables a method initialises itself


@dataclass(frozen=True)
class Channel:
    """One channel a method may name in `channels`: what attention then calls and what it reads of the values."""
    method: str       # the protocol method attention calls for it
    description: str  # what it is for (the protocol table of docs/architecture.md, the sequence-parallel table)
    # Its values are a layer's own: the protocol method computes them from the layer's input x, every layer asks
    # for them (`layer_values`), and attention keeps them in that layer's copy of the plan
    # (megatron/model/attention/strategy.py's `with_layer`), a KV cache beside the layer's keys.
    layer: bool = False
    # Its values are per-token g [b, H, s, ...] whose running sums over the tokens the scores read (F_i - F_j):
    # attention keeps the sums, in fp32 or wider, and a KV cache runs them on from the cached tokens.
    running_sum: bool = False


# The channels, by the name a method lists in `channels`. The names are the attention strategies' vocabulary
# (megatron/model/attention/needs.py).
CHANNELS = {
    "query_terms": Channel("pairwise", "per-head score terms (bias, weight) that depend on the query position "
                                       "itself, not on d = i - j alone; `distance_tables_at` may still give tables "
                                       "where they do not"),
    "token_terms": Channel("token_terms", "per-token values from the layer's input whose running sums F add "
                                          "F_i - F_j to score(i, j)", layer=True, running_sum=True),
    "key_transforms": Channel("key_transforms", "Householder transforms of the keys by the tokens between key and "
                                                "query", layer=True),
    "channel_decays": Channel("channel_decays", "per-channel log-gates from the layer's input: channel n of "
                                                "q_i . k_j decays by exp(P_in - P_jn), P their running sums",
                              layer=True, running_sum=True),
    "score_rewrite": Channel("modify_scores", "a rewrite of the written-out pre-softmax score matrix, row by row"),
    "whole_matrix": Channel("modify_scores", "with score_rewrite: the rewrite of a row reads keys past its own, so "
                                             "only the forward's whole matrix at once gives its numbers"),
    "normaliser": Channel("normalise", "the method's own attention weights in place of the softmax"),
    "query_scale": Channel("query_scale", "a factor on query i's whole logits row from the number of keys it sees, "
                                          "which attention counts"),
}
LAYER_CHANNELS = tuple(name for name, channel in CHANNELS.items() if channel.layer)
# The class flags that named channels before `channels` did: a method written against them ports by listing
# the channel instead (`uses_token_terms = True` -> `channels = frozenset({"token_terms"})`).
FORMER_FLAGS = {"distance_only": "query_terms (for distance_only = False)", "uses_token_terms": "token_terms",
                "uses_key_transforms": "key_transforms", "modifies_scores": "score_rewrite",
                "reads_whole_matrix": "whole_matrix", "replaces_softmax": "normaliser", "scales_queries": "query_scale"}


class PositionalEmbedding(nn.Module):
    name: str = "?"            # set by @register
    channels: frozenset = frozenset()  # the channels of CHANNELS this method uses (an instance may narrow them)
    max_length: int | None = None  # largest number of positions the method can embed (learned)
    uses_max_positions: bool = False  # parameters sized by max-position-embeddings (learned)
    per_layer: bool = False  # its parameters are each layer's own: one module per layer (fox)
    # Why a score term reads every head's scores (dape), or None: heads are independent, so sequence parallelism
    # (megatron/model/sequence_parallel.py) may give each rank the whole sequence for a share of them.
    mixes_heads: str | None = None

    def __init_subclass__(cls, **kwargs):
        """A method class that still sets a former flag, or names a channel nobody knows, is refused at once:
        attention would otherwise never call the protocol method the flag stood for."""
        super().__init_subclass__(**kwargs)
        former = [flag for flag in FORMER_FLAGS if flag in vars(cls)]
        if former:
            raise TypeError(f"{cls.__name__} sets {', '.join(former)}: name the channel in `channels` instead ("
                            + "; ".join(f"{flag} -> {FORMER_FLAGS[flag]}" for flag in former) + ").")
        unknown = sorted(set(cls.channels) - set(CHANNELS))
        if unknown:
            raise TypeError(f"{cls.__name__}.channels names {', '.join(map(repr, unknown))}, which is not a channel; "
                            f"the channels are {', '.join(CHANNELS)}.")

    @dataclass
    class Options:
        """No options; a method with some declares its own `Options` dataclass."""

    def __init__(self, shape: ModelShape, options=None):
        super().__init__()
        self.shape, self.options = shape, self.Options() if options is None else options
        self.num_heads, self.head_dim, self.hidden_size = shape.num_heads, shape.head_dim, shape.hidden_size
        # Follows the module across .to(device) (never .to(dtype): it is empty), so every method
        # knows where to build its tables even when it has no parameters.
        self.register_buffer("_device_anchor", torch.empty(0), persistent=False)

    @property
    def device(self) -> torch.device:
        return self._device_anchor.device

    @property
    def qk_head_dim(self) -> int:
        """The head size of q and k as `rotate_qk` returns them (v keeps head_dim): a kernel sized by it."""
        return self.head_dim

    def add_to_embeddings(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        return x  # x [b, s, hidden], positions LongTensor [s]

    def rotate_qk(self, q, k, q_positions, k_positions):
        return q, k  # q, k [b, H, s, D]

    def rotation_tables(self, q_positions, k_positions, dtype=torch.float32):
        """((cos, sin) of the queries, (cos, sin) of the keys) when `rotate_qk` is a rotation by such tables
        (rotary, xpos: rotary.py's `rotate`), computed once per forward so that a fused kernel applies them
        in every layer; None: rotate_qk is the method's own code."""
        return None

    def token_terms(self, x: torch.Tensor) -> torch.Tensor | None:
        """g [b, H, s] (float32, differentiable) from the attention input x [b, s, hidden] (after the
        layer's input norm), adding g_{j+1} + ... + g_i = F_i - F_j to score(i, j); None: no such terms."""
        return None

    def layer_values(self, x: torch.Tensor) -> dict:
        """{channel: value} of LAYER_CHANNELS from the attention input x [b, s, hidden] of one layer (a value
        is None where the method has no such channel): what the layer hands its attention plan."""
        return {channel: getattr(self, CHANNELS[channel].method)(x) for channel in LAYER_CHANNELS}

    @staticmethod
    def reads_running_sum(channel: str) -> bool:
        """Whether the scores read a layer value of `channel` as its running sum over the tokens (CHANNELS): asked
        by attention, which imports no positional file (the method comes in as an object)."""
        return channel in CHANNELS and CHANNELS[channel].running_sum

    def distance_tables(self, length: int):
        """(bias[H, length] | None, weight[H, length] | None) over d = 0..length-1, float32, differentiable."""
        return None, None

    def distance_tables_at(self, positions: torch.Tensor, span: int):
        """A forward's `distance_tables(span)` at these positions (span: their largest distance + 1) when its
        terms there depend on d = i - j alone, else None (attention then calls `pairwise`). Always the tables
        for a method without the query_terms channel; one with it may give them where its terms do not read i."""
        return None if "query_terms" in self.channels else self.distance_tables(span)

    def pairwise(self, q_positions: torch.Tensor, k_positions: torch.Tensor):
        """(bias[H, q, k] | None, weight[H, q, k] | None) for these query and key positions.

        Future keys (j > i) get d = 0; the causal mask removes them anyway."""
        d = (q_positions[:, None] - k_positions[None, :]).clamp(min=0)  # [q, k]
        bias, weight = self.distance_tables(int(d.max()) + 1 if d.numel() else 1)
        return (None if bias is None else bias[:, d], None if weight is None else weight[:, d])

    def pairwise_bytes(self, needs_grad: bool) -> int:
        """Bytes `pairwise` allocates per (query, key) pair at its peak, for attention's memory estimate
        (megatron/model/attention/sdpa.py's sdpa_bytes), with autograd's saved tensors when `needs_grad`:
        the int64 distance and the fp32 bias and weight gathered from the tables."""
        return 8 + 2 * 4 * self.num_heads

    def modify_scores(self, scores, bias, q, k, q_positions, k_positions, visible):
        """The pre-softmax logits [b, H, q, k] of a method with the score_rewrite channel.

        scores: (q.k / sqrt(D)) * weight [b, H, q, k] in fp32 or wider; bias: the method's bias [.., H, q, k]
        (pairwise or gathered from its tables) or None; q [b, H, q, D], k [b, H, k, D] (rotated, the
        scores' dtype); positions LongTensor [q], [k] (a cached step with per-row positions: [b, q], [b, k]);
        visible: bool, broadcastable to [b, H, q, k], True where key j is visible to query i. Attention masks
        the result with `visible` afterwards. The keys are 0..(at least) the last visible one of each
        query and nothing later can be visible, so an edit that reads only a row's visible entries gives
        the same numbers for a block of queries, the full matrix and a KV-cache step."""
        return scores if bias is None else scores + bias

    def query_scale(self, keys_seen: torch.Tensor) -> torch.Tensor | None:
        """t [b | 1, H, s] float32 multiplying query i's whole logits row (q_i and its bias), from keys_seen
        [b | 1, s]: the number of keys query i sees (attention counts them); None: no such factor."""
        return None

    def normalise(self, logits, visible, q_positions, k_positions):
        """The attention weights [b, H, q, k] from the logits (masked: -inf, or the dtype's minimum, where
        not `visible`); positions as in modify_scores. The softmax, unless the method has the normaliser channel."""
        return logits.softmax(dim=-1)

    def key_transforms(self, x: torch.Tensor):
        """(w [b, H, s, D], beta [b, H, s]) (float32, differentiable) from the attention input x [b, s, hidden]:
        score(i, j) uses q_i^T H_i ... H_{j+1} k_j, H_t = I - beta_t w_t w_t^T; None: no such transforms."""
        return None

    def channel_decays(self, x: torch.Tensor):
        """g [b, H, s, D] (float32 or wider, differentiable, <= 0) from the attention input x [b, s, hidden]:
        score(i, j) uses sum_n q_in k_jn exp(P_in - P_jn), P = cumsum(g) over the tokens; None: no such decays."""
        return None

    def score_bytes(self) -> int:
        """Bytes `modify_scores` allocates at its peak per (query, key) pair, per head and sequence (the
        planner's memory estimate multiplies by b * H)."""
        return 0

    def _last_positions(self, query_length: int, key_length: int):
        # The queries are the last `query_length` of `key_length` positions (a KV-cache step when 1).
        if not 0 < query_length <= key_length:
            raise PositionalEmbeddingError(
                f"pos-emb '{self.name}': need 0 < query_length <= key_length, got {query_length} and {key_length}")
        keys = torch.arange(key_length, device=self.device)
        return keys[key_length - query_length:], keys

    def bias(self, query_length: int, key_length: int) -> torch.Tensor | None:
        """Additive bias [H, q, k] for the last `query_length` queries over `key_length` keys."""
        return self.pairwise(*self._last_positions(query_length, key_length))[0]

    def weight(self, query_length: int, key_length: int) -> torch.Tensor | None:
        """Multiplicative score weight [H, q, k] (kerple_bias_weight), else None."""
        return self.pairwise(*self._last_positions(query_length, key_length))[1]

    def kernel_parameters(self) -> dict[str, torch.Tensor]:
        """name -> Tensor[H] of the effective (constrained) learnable kernel values."""
        return {}


def softmax_wrapper_problem(base: "PositionalEmbedding", key: str) -> str | None:
    """Why the wrapper config key `key` (attention-temperature, dape), which scales or rewrites the logits
    of a softmax over q.k scores, cannot wrap `base`; None when it can. A wrapper is a module of its own, so it
    passes on no layer channel (its `layer_values` are all None) and no normaliser."""
    if "normaliser" in base.channels:
        what = "replaces the softmax"
    elif layered := [channel for channel in LAYER_CHANNELS if channel in base.channels]:
        what = "has " + "; and ".join(CHANNELS[channel].description for channel in layered)
    else:
        return None
    return (f"{key} is set, but pos-emb {base.name!r} {what}, which the {key} wrapper does not pass on (it would "
            f"silently attend with a plain softmax). Remove {key} for this method.")
