"""The GPT-NeoX-style decoder: embedding, pre-norm layers, final norm, output head."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from megatron.model.attention import plan_attention
from megatron.model.init_functions import init_normal_
from megatron.model.attention.cached import per_row, plan_cached
from megatron.model.kv_cache import KVCache
from megatron.model.layer_pattern import build_kind, layer_kinds, per_layer_modules
from megatron.model.model_config import ModelConfig
from megatron.model.norms import build_norm
from megatron.model.positional_embeddings import PositionalEmbedding
from megatron.model.sliced_loss import logits_losses, sliced, token_losses
from megatron.model.transformer import TransformerLayer
from megatron.errors import NeoXArgsError


def adds_to_embeddings(pe) -> bool:
    return type(pe).add_to_embeddings is not PositionalEmbedding.add_to_embeddings


def shared_and_row_positions(position_ids, document_ids, b: int, s: int, device):
    """(positions [s] shared by the rows, per-row positions [b, s] or None) from forward's arguments.

    Per-row positions must step by 1 inside each document (a row is one document without
    `document_ids`): the per-distance tables are then exact when read at the index 0..s-1, which is
    what the shared positions become. Rows that all agree are shared positions."""
    if document_ids is not None and document_ids.shape != (b, s):
        raise ValueError(f"document_ids must be [{b}, {s}] like tokens; got shape {tuple(document_ids.shape)}.")
    if position_ids is None:
        return torch.arange(s, device=device), None
    if position_ids.shape == (s,):
        return position_ids, None
    if position_ids.shape != (b, s):
        raise ValueError(f"position_ids must be [{s}] shared by the batch or [{b}, {s}] per row; got shape "
                         f"{tuple(position_ids.shape)}.")
    if bool((position_ids == position_ids[:1]).all()):
        return position_ids[0], None
    steps = position_ids.diff(dim=1) == 1
    if document_ids is not None:
        steps = steps | (document_ids.diff(dim=1) != 0)
    if not bool(steps.all()):
        raise ValueError("per-row position_ids must step by 1 inside each document (as reset-position-ids "
                         "makes them); give shared position_ids [s] for other positions.")
    return torch.arange(s, device=device), position_ids


class GPTModel(nn.Module):
    def __init__(self, config: ModelConfig):
        """`config`: the model (megatron/model/model_config.py; a run's config gives it with
        megatron.neox_arguments.to_model.model_config); its `padded_vocab_size` is the embedding rows,
        the tokenizer's vocabulary padded."""
        super().__init__()
        self.config = config
        self.vocab_size = vocab_size = config.padded_vocab_size
        self.attention_config = config.attention
        self.checkpoint_activations = config.checkpoint_activations
        self.loss_head = config.loss_head

        self.word_embeddings = nn.Embedding(vocab_size, config.hidden_size)
        init_normal_(self.word_embeddings.weight, config.init_method, config)
        self.embedding_dropout = nn.Dropout(config.hidden_dropout)
        # One positional module per kind of layer (layer_pattern.py; one kind without a pattern), shared by
        # the layers of that kind (the paper's setting), or one per layer (pos-emb-per-layer, or a method
        # whose parameters are each layer's own, such as fox's forget gate: per_layer_modules).
        self.layer_kinds = layer_kinds(config)
        per_layer = per_layer_modules(config)
        kinds = self.layer_kinds if per_layer else list(dict.fromkeys(self.layer_kinds))
        self.module_kinds = kinds
        self.pos_embs = nn.ModuleList(build_kind(kind, config) for kind in kinds)
        self.windows = [kind.window for kind in kinds]  # each module's attention window
        # Layer i reads module layer_module[i] and its plan.
        self.layer_module = list(range(len(kinds))) if per_layer else \
            [kinds.index(kind) for kind in self.layer_kinds]
        if config.pos_emb_per_layer and adds_to_embeddings(self.pos_embs[0]):
            raise NeoXArgsError(
                f"pos-emb-per-layer is set, but pos-emb {config.pos_emb!r} adds positions to the "
                "token embeddings once, before the first layer, so it has nothing to give each layer. "
                "Remove pos-emb-per-layer (it is meant for methods that act inside attention).")
        self.layers = nn.ModuleList(TransformerLayer(config) for _ in range(config.num_layers))
        self.final_layernorm = build_norm(config)
        # A sequence-parallel group's side (megatron/model/sequence_parallel.py: forward then takes this rank's
        # shard of every sequence), set by the run, not the config: a checkpoint loads under any group size.
        self.sequence_parallel = None
        self.output_head = None
        if config.no_weight_tying:
            self.output_head = nn.Linear(config.hidden_size, vocab_size, bias=False)
            init_normal_(self.output_head.weight, config.init_method, config)

    def positional_embeddings(self) -> list[nn.Module]:
        return list(self.pos_embs)

    def position_limit(self) -> int | None:
        """The most positions this model embeds: the fewest of its positional modules' `max_length` (a
        position table's rows, `learned`); None: any number (relative methods extrapolate)."""
        return min((pe.max_length for pe in self.pos_embs if pe.max_length), default=None)

    def layer_windows(self) -> list[int | None]:
        """Each layer's attention window (None: every earlier token)."""
        return [self.windows[module] for module in self.layer_module]

    def positional_labels(self) -> list[str]:
        """A name per positional module, for logs: '' (one module), 'layer{i}' (one per layer), or
        'kind{k}_{method}' (one per kind of layer of a layer-pattern)."""
        if len(self.pos_embs) == 1:
            return [""]
        if len(self.pos_embs) == len(self.layers) and self.layer_module == list(range(len(self.layers))):
            return [f"layer{i}" for i in range(len(self.layers))]
        return [f"kind{k}_{pe.name}" for k, pe in enumerate(self.pos_embs)]

    def forward(self, tokens: torch.Tensor, position_ids: torch.Tensor | None = None,
                cache: KVCache | None = None, padding: torch.Tensor | None = None,
                document_ids: torch.Tensor | None = None, labels: torch.Tensor | None = None,
                vocab_size: int | None = None) -> torch.Tensor:
        """tokens [b, s] -> logits [b, s, padded_vocab]; with `labels` [b, s], their cross entropy [b, s] (fp32)
        over the first `vocab_size` rows (default all) instead, the head applied by slices (`loss-head`,
        sliced_loss.py) so that the [b, s, vocab] logits need not exist.

        `position_ids`: [s] shared by the rows (default 0..s-1), or [b, s] per row, stepping by 1
        inside each document (reset-position-ids: positions restart after each EOD). `document_ids`
        [b, s]: each token's packed document (megatron/data/packed_documents.py); a token attends only
        to keys of its own document (reset-attention-mask). None: to every earlier key.

        With a `cache` (kv_cache.py), `tokens` continue each of its rows: each row's next positions,
        attending to the cached keys and values, which they join; `padding` [b, s] marks left-padding
        that no token sees. For inference only (no dropout, no activation checkpointing)."""
        b, s = tokens.shape
        if cache is not None:
            positions = cache.append(padding, s)  # [b, s]
            add_positions = self.pos_embs[0].add_to_embeddings
            x = per_row(lambda p, x_: add_positions(x_, p), positions, self.word_embeddings(tokens))
            plans = [plan_cached(pe, cache, s, window) for pe, window in zip(self.pos_embs, self.windows)]
            return self._layers_and_head(x, plans, cache.layers, labels, vocab_size)
        if self.sequence_parallel is not None:
            return self.sequence_parallel.forward(self, tokens, position_ids, document_ids, labels, vocab_size)
        position_ids, row_positions = shared_and_row_positions(position_ids, document_ids, b, s, tokens.device)
        x = self.word_embeddings(tokens)  # [b, s, hidden]
        if row_positions is None:
            x = self.pos_embs[0].add_to_embeddings(x, position_ids)
        else:
            x = per_row(lambda p, x_: self.pos_embs[0].add_to_embeddings(x_, p), row_positions, x)
        x = self.embedding_dropout(x)
        # Path and positional tables once per forward (per positional module), shared by the layers.
        attention = self.attention_config
        plans = [plan_attention(pe, position_ids, attention.run(window=window, training=self.training,
                                                                dtype=self.compute_dtype(), batch=b,
                                                                documents=document_ids, row_positions=row_positions,
                                                                sink=self.config.attention_sink))
                 for pe, window in zip(self.pos_embs, self.windows)]
        return self._layers_and_head(x, plans, [None] * len(self.layers), labels, vocab_size)

    def compute_dtype(self) -> torch.dtype:
        """The dtype of q, k and v in the layers: autocast's where it is on, else the weights'."""
        device = self.word_embeddings.weight.device.type
        if torch.is_autocast_enabled(device):
            return torch.get_autocast_dtype(device)
        return self.word_embeddings.weight.dtype

    def _layers_and_head(self, x, plans, kvs, labels=None, vocab_size=None):
        for i, layer in enumerate(self.layers):
            plan = plans[self.layer_module[i]]
            if self.checkpoint_activations and torch.is_grad_enabled() and kvs[i] is None:
                x = checkpoint(layer, x, plan, use_reentrant=False)
            else:
                x = layer(x, plan, kvs[i])
        x = self.final_layernorm(x)
        head = self.word_embeddings.weight if self.output_head is None else self.output_head.weight
        if labels is None:
            return F.linear(x, head)  # [b, s, padded_vocab]
        vocab_size = vocab_size or head.shape[0]
        if sliced(self.loss_head, x.device):
            return token_losses(x, head, labels, vocab_size)
        return logits_losses(F.linear(x, head), labels, vocab_size)
