"""The one place a run's config becomes the model's: `model_config(neox_args, vocab_rows)` is the
`ModelConfig` that `GPTModel` is built from (megatron/model/model_config.py); the model never reads the run
config itself."""
from megatron.model.attention.config import AttentionConfig
from megatron.model.layer_pattern import pattern_methods
from megatron.model.model_config import ARCHITECTURE_KEYS, LENGTH_KEYS, TOKENIZER_FILES, ModelConfig, model_options
from megatron.model.positional_embeddings import PositionalEmbedding, build_positional_embedding, declared_options, option_names

INIT_KEYS = ("init_method", "output_layer_init_method", "init_method_std")
RUN_MODEL_KEYS = ("hidden_dropout", "checkpoint_activations", "loss_head")


def attention_config(neox_args) -> AttentionConfig:
    """The attention keys of a run (checked by AttentionConfig itself)."""
    return AttentionConfig(neox_args.attention_impl, neox_args.attention_block_size, neox_args.attention_window,
                           neox_args.attention_dropout, neox_args.attention_memory_budget,
                           neox_args.attention_flex_kernel_options)


def model_config(neox_args, vocab_rows: int | None) -> ModelConfig:
    """The model `neox_args` builds with `vocab_rows` embedding rows (`tokenizer.padded_vocab_size`; None
    where only the layers are asked about, before the tokenizer is built)."""
    recorded = model_options(neox_args.pos_emb, neox_args.layer_pattern)
    used = {o for method in pattern_methods(neox_args.pos_emb, neox_args.layer_pattern) for o in option_names(method)}
    return _model_config(neox_args, vocab_rows, recorded, sorted(used - set(recorded)))


def layers_config(neox_args) -> ModelConfig:
    """The model of a config still being checked (its layer-pattern may name unknown methods): every option
    any method declares, so that layer_pattern.layer_kinds names a bad entry in its own words."""
    return _model_config(neox_args, None, (), [o.name for o in declared_options()])


def _model_config(neox_args, vocab_rows, recorded, others) -> ModelConfig:
    values = {key: vocab_rows if key == "padded_vocab_size" else getattr(neox_args, key) for key in ARCHITECTURE_KEYS}
    return ModelConfig(**values, options={k: getattr(neox_args, k) for k in recorded},
                       tokenizer_files={k: getattr(neox_args, k) for k in TOKENIZER_FILES},
                       lengths={k: getattr(neox_args, k) for k in LENGTH_KEYS},
                       **{k: getattr(neox_args, k) for k in INIT_KEYS + RUN_MODEL_KEYS},
                       run_options={k: getattr(neox_args, k) for k in others},
                       attention=attention_config(neox_args))


def positional_embedding(neox_args) -> PositionalEmbedding:
    """The run's method (`pos-emb`) alone, built with its options' config values."""
    return build_positional_embedding(
        neox_args.pos_emb, num_heads=neox_args.num_attention_heads,
        head_dim=neox_args.hidden_size // neox_args.num_attention_heads, hidden_size=neox_args.hidden_size,
        max_position_embeddings=neox_args.max_position_embeddings, init_method_std=neox_args.init_method_std,
        **{o: getattr(neox_args, o) for o in option_names(neox_args.pos_emb)})
