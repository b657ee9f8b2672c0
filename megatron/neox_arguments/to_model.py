"""The one place a run's config becomes the model's: `model_config(neox_args, vocab_rows)` is the
`ModelConfig` that `GPTModel` is built from (megatron/model/model_config.py); the model never reads the run
config itself."""
import dataclasses

from megatron.model.attention.config import AttentionConfig
from megatron.model.layer_pattern import parse_pattern
from megatron.model.model_config import (ATTENTION_KEYS, FIELD_KEYS, LENGTH_KEYS, TOKENIZER_FILES, ModelConfig,
                                         model_options, per_run_option_keys, run_choices)
from megatron.model.positional_embeddings import PositionalEmbedding, build_positional_embedding, declared_options, option_names


def attention_config(neox_args) -> AttentionConfig:
    """The attention keys of a run (checked by AttentionConfig itself)."""
    return AttentionConfig(*(getattr(neox_args, k) for k in ATTENTION_KEYS))


def model_config(neox_args, vocab_rows: int | None) -> ModelConfig:
    """The model `neox_args` builds with `vocab_rows` embedding rows (`tokenizer.padded_vocab_size`; None
    where only the layers are asked about, before the tokenizer is built). NeoXArgs builds it once, as
    `neox_args.model`, after its checks."""
    layers = layers_config(neox_args).layers
    recorded = _recorded(neox_args, vocab_rows, layers, model_options(neox_args.pos_emb, layers))
    return dataclasses.replace(recorded, **run_choices(vars(neox_args), per_run_option_keys(recorded)))


def layers_config(neox_args) -> ModelConfig:
    """The model's layers for a config still being checked (group_checks.py) and for model_config: its
    `layer-pattern` read into typed layers (layer_pattern.parse_pattern, whose LayerPatternError names a bad
    entry), against the run's values of every option any method declares, so that an entry of any method is
    checked in its own words."""
    unlayered = dataclasses.replace(_recorded(neox_args, None, None, ()),
                                    **run_choices(vars(neox_args), [o.name for o in declared_options()]))
    return dataclasses.replace(unlayered, layers=parse_pattern(neox_args.layer_pattern, unlayered))


def _recorded(neox_args, vocab_rows, layers, recorded) -> ModelConfig:
    """The part of the model a checkpoint records: architecture, the methods' options, tokenizer, lengths."""
    values = {key: vocab_rows if key == "padded_vocab_size" else getattr(neox_args, key) for key in FIELD_KEYS}
    return ModelConfig(**values, layers=layers, options={k: getattr(neox_args, k) for k in recorded},
                       tokenizer_files={k: getattr(neox_args, k) for k in TOKENIZER_FILES},
                       lengths={k: getattr(neox_args, k) for k in LENGTH_KEYS})


def positional_embedding(neox_args) -> PositionalEmbedding:
    """The run's method (`pos-emb`) alone, built with its options' config values."""
    return build_positional_embedding(
        neox_args.pos_emb, num_heads=neox_args.num_attention_heads,
        head_dim=neox_args.hidden_size // neox_args.num_attention_heads, hidden_size=neox_args.hidden_size,
        max_position_embeddings=neox_args.max_position_embeddings, init_method_std=neox_args.init_method_std,
        **{o: getattr(neox_args, o) for o in option_names(neox_args.pos_emb)})
