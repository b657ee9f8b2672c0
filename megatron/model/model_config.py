"""`ModelConfig`: everything that decides a model's weights and its forward pass: `GPTModel(config)` reads
nothing else. The config package builds it from a run's config (megatron/neox_arguments/to_model.py); it is
saved in every checkpoint (client-state key `model_config`), so that a checkpoint describes its own model and
loading it needs no YAML file that says the same again.

Three kinds of field: the architecture (recorded and compared with a checkpoint), how fresh weights are drawn
(init: a checkpoint's weights replace them), and the run's own choices (attention path and window, dropout,
per-run options such as rotary-scaling: a run applies its own with `dataclasses.replace`). Only the first kind,
the lengths and the tokenizer's files are recorded, and the per-run choices the weights were trained with where
they are not the default (an extended model's rotary-scaling), never compared.

The record in a checkpoint is flat, one entry per config key (`num_layers`, `pos_emb`, each of the method's
options, ...), as checkpoints written before this class had it (schema 1, no `schema` entry); schema 2 adds
`schema` and the tokenizer's files. Both read back with `ModelConfig.from_record`. `layer-pattern` is recorded
as the config file wrote it (the property `layer_pattern`) and read back into the typed field `layers`.
"""
from dataclasses import dataclass, field, fields

from megatron.model.attention.config import AttentionConfig
from megatron.model.layer_pattern import Layer, parse_pattern, pattern_methods
from megatron.model.positional_embeddings import checkpoint_options, extension_options, option_names, per_run_options
from megatron.model.positional_embeddings.registry import OPTIONS

SCHEMA = 2

# Config keys that fix the parameters' shapes or meaning, whatever the method, in the order a mismatch
# names them (padded_vocab_size: the model's embedding rows, the tokenizer's vocabulary padded).
ARCHITECTURE_KEYS = (
    "num_layers", "hidden_size", "num_attention_heads", "intermediate_size", "padded_vocab_size",
    "tokenizer_type", "norm", "layernorm_epsilon", "activation", "no_weight_tying", "gpt_j_residual",
    "pos_emb", "pos_emb_per_layer", "layer_pattern", "attention_temperature", "dape", "attention_output_gate",
    "attention_sink",
)
# Those that are fields as they are; layer-pattern is the field `layers`, typed (parse_pattern reads the list).
FIELD_KEYS = tuple(key for key in ARCHITECTURE_KEYS if key != "layer_pattern")
# Recorded to rebuild the tokenizer, never compared: the same vocabulary may live at another path.
TOKENIZER_FILES = ("vocab_file", "merge_file")
# Recorded for the run's record; only a method with `uses_max_positions` (learned) has parameters sized
# by one of them, and then max_position_embeddings is among its checkpoint options.
LENGTH_KEYS = ("seq_length", "max_position_embeddings", "seq_length_val", "attention_window")
# The run's own choices (never recorded), by config key: how fresh weights are drawn, dropout, recomputation,
# the loss head, and the attention keys in AttentionConfig's field order.
INIT_KEYS = ("init_method", "output_layer_init_method", "init_method_std")
RUN_MODEL_KEYS = ("hidden_dropout", "checkpoint_activations", "loss_head")
ATTENTION_KEYS = ("attention_impl", "attention_block_size", "attention_window", "attention_dropout",
                  "attention_memory_budget", "attention_flex_kernel_options")


@dataclass(frozen=True)
class ModelConfig:
    """Every field has the config key's default (GPT-2 small with a learned position table, GPT-2's vocabulary
    padded to 50304 rows), so a model is one short literal: `GPTModel(ModelConfig(num_layers=2, hidden_size=64,
    num_attention_heads=4, padded_vocab_size=256, pos_emb="alibi"))`."""
    num_layers: int = 12
    hidden_size: int = 768
    num_attention_heads: int = 12
    intermediate_size: int | None = None  # None: 4 x hidden_size
    padded_vocab_size: int = 50304
    tokenizer_type: str = "GPT2BPETokenizer"
    norm: str = "layernorm"
    layernorm_epsilon: float = 1e-5
    activation: str = "gelu"
    no_weight_tying: bool = False
    gpt_j_residual: bool = False
    pos_emb: str = "learned"
    pos_emb_per_layer: bool = False
    # Hybrid layers: one typed entry per `layer-pattern` entry (layer_pattern.py), None: every layer is pos_emb.
    layers: tuple[Layer, ...] | None = None
    attention_temperature: dict | None = None  # positional_embeddings/temperature.py, None: none
    dape: dict | None = None  # positional_embeddings/dape.py, None: none
    attention_output_gate: str | None = None  # "head" | "channel" (transformer.py's OutputGate), None: none
    # True: a learnable sink logit per layer and head (transformer.py's SelfAttention.sink); None: none (false is
    # kept as None, which an older record's absent key reads as, so such a checkpoint compares equal)
    attention_sink: bool | None = None
    options: dict = field(default_factory=dict)  # the method's checkpoint options: {config key: value}
    tokenizer_files: dict = field(default_factory=dict)  # {vocab_file, merge_file}: as the run gave them
    # LENGTH_KEYS of the run, for the record (the default: seq-length's default, and the position table's rows
    # that the config derives from it, which a learned table needs).
    lengths: dict = field(default_factory=lambda: {"seq_length": 512, "max_position_embeddings": 512})
    # How fresh weights are drawn (init_functions.py); never recorded: a checkpoint's weights replace them.
    # Neither these nor the run's choices below take part in `==`: two configs are equal when they record
    # the same model.
    init_method: str = field(default="normal", compare=False)
    output_layer_init_method: str = field(default="scaled_normal", compare=False)
    init_method_std: float = field(default=0.02, compare=False)
    # The run's own choices, never recorded nor compared: the methods' per-run and init-only options
    # ({config key: value}; a key left out is the option's default), attention, dropout, recomputation.
    run_options: dict = field(default_factory=dict, compare=False)
    attention: AttentionConfig = field(default_factory=AttentionConfig, compare=False)
    hidden_dropout: float = field(default=0.0, compare=False)
    checkpoint_activations: bool = field(default=False, compare=False)
    loss_head: str = field(default="auto", compare=False)  # sliced_loss.py: "auto" | "sliced" | "full"

    @property
    def layer_pattern(self) -> list | None:
        """`layer-pattern` as the config file wrote it (what the record and the Hugging Face config.json keep)."""
        return None if self.layers is None else [layer.written for layer in self.layers]

    @property
    def max_position_embeddings(self) -> int | None:
        """Rows of a position table (`learned`), recorded among the lengths."""
        return self.lengths.get("max_position_embeddings")

    def option(self, key: str):
        """The value of method option `key` (a config key): this model's, else the option's default."""
        for values in (self.options, self.run_options):
            if key in values:
                return values[key]
        return OPTIONS[key].default

    def __post_init__(self):
        if self.attention_sink is False:
            object.__setattr__(self, "attention_sink", None)
        if self.layers is not None:
            if not self.layers or not all(isinstance(layer, Layer) for layer in self.layers):
                raise ValueError(f"layers is {self.layers!r}; give a non-empty sequence of layer_pattern.Layer "
                                 "entries, or None for every layer the same (a config file's layer-pattern list is "
                                 "read by layer_pattern.parse_pattern).")
            object.__setattr__(self, "layers", tuple(self.layers))

    @classmethod
    def from_record(cls, record: dict) -> "ModelConfig":
        """From a checkpoint's `model_config` (schema 1 or 2). A key an older record lacks reads as None,
        so comparing it with a run names it instead of passing unchecked."""
        if not isinstance(record, dict):
            raise ValueError(f"it is a {type(record).__name__}, not a mapping of config keys")
        # The pattern is read against the model the record describes: its method, temperature, dape and every
        # option it records (a record is flat, one entry per config key).
        context = cls(**{key: record.get(key) for key in FIELD_KEYS},
                      run_options={k: v for k, v in record.items() if k in OPTIONS})
        layers = parse_pattern(record.get("layer_pattern"), context)
        options = {k: record.get(k) for k in model_options(record["pos_emb"], layers)} \
            if record.get("pos_emb") is not None else {}
        trained = {k: record[k] for k in trained_choices(record["pos_emb"], layers)
                   if k in record} if record.get("pos_emb") is not None else {}
        return cls(**{key: record.get(key) for key in FIELD_KEYS}, layers=layers, options=options,
                   tokenizer_files={k: record[k] for k in TOKENIZER_FILES if k in record},
                   lengths={k: record[k] for k in LENGTH_KEYS if k in record}, run_options=trained)

    def trained_with(self) -> dict:
        """The per-run choices the weights were trained with that are not their default (an extended model's
        rotary-scaling): recorded, so that the checkpoint alone rebuilds the model that was trained."""
        keys = trained_choices(self.pos_emb, self.layers)
        return {k: self.run_options[k] for k in keys
                if self.run_options.get(k, OPTIONS[k].default) != OPTIONS[k].default}

    def record(self) -> dict:
        """What a checkpoint stores under `model_config`: flat, readable by code that predates `schema`."""
        values = {key: getattr(self, key) for key in ARCHITECTURE_KEYS}
        return {"schema": SCHEMA, **values, **self.lengths, **self.options, **self.trained_with(),
                **self.tokenizer_files}

    def config_values(self) -> dict:
        """{config key: value} that build this model (and its tokenizer) with the run's other keys."""
        values = {key: getattr(self, key) for key in ARCHITECTURE_KEYS if key != "padded_vocab_size"}
        return {**values, **self.options, **self.trained_with(), **self.tokenizer_files}


def run_choices(values: dict, option_keys) -> dict:
    """The fields a run sets on a model for itself, for `dataclasses.replace`, from `values` ({config key:
    value}): the init keys, dropout, recomputation, loss head, attention, and the methods' options
    `option_keys` (those no checkpoint records, `per_run_option_keys`). A key `values` lacks keeps the
    field's default (a run config that predates the key)."""
    return {**{k: values[k] for k in INIT_KEYS + RUN_MODEL_KEYS if k in values},
            "run_options": {k: values[k] for k in option_keys if k in values},
            "attention": AttentionConfig(**{f.name: values[k] for k, f in zip(ATTENTION_KEYS, fields(AttentionConfig))
                                            if k in values})}


def per_run_option_keys(config: ModelConfig) -> list[str]:
    """The options of the model's methods that a checkpoint does not record: the run chooses them."""
    used = {o for method in pattern_methods(config.pos_emb, config.layers) for o in option_names(method)}
    return sorted(used - set(config.options))


def differences(saved: ModelConfig, current: ModelConfig, fine_tune: bool = False) -> list[str]:
    """'key: checkpoint X, this run Y' for every key that must agree but does not. Sequence lengths may
    differ (length extrapolation is the point), except for `learned`, whose table has
    max-position-embeddings rows (one of its options). A fine-tune may also change the options that shape
    no parameter (`extension_keys`: rotary-emb-base), as extending a model to a longer context does."""
    free = extension_keys(current.pos_emb, current.layers) if fine_tune else ()
    layers = (saved.layers, current.layers)
    if fine_tune:  # a layer's entry may extend it too (OLMo 3: YaRN on the full-attention layers only)
        free_in_entries = {*free, *trained_choices(current.pos_emb, current.layers), "attention_window"}
        layers = tuple(None if entries is None else tuple(layer.without(free_in_entries) for layer in entries)
                       for entries in layers)
    pairs = [(key, getattr(saved, key), getattr(current, key)) for key in FIELD_KEYS]
    pairs.insert(ARCHITECTURE_KEYS.index("layer_pattern"), ("layer_pattern", *layers))
    if (saved.pos_emb, layers[0]) == (current.pos_emb, layers[1]):
        pairs += [(key, saved.options.get(key), current.options.get(key)) for key in sorted(current.options)
                  if key not in free]
    return [f"{key.replace('_', '-')}: checkpoint {_as_written(theirs)!r}, this run {_as_written(ours)!r}"
            for key, theirs, ours in pairs if theirs != ours]


def _as_written(value):
    """A value as a config file gives it: typed layers as the pattern's entries were written."""
    if isinstance(value, tuple) and value and all(isinstance(layer, Layer) for layer in value):
        return [layer.written for layer in value]
    return value


def extension_keys(pos_emb: str, layers=None) -> tuple[str, ...]:
    """The config keys of a model's methods that a fine-tune may change besides the lengths and the per-run
    choices (rotary-scaling): those that shape no parameter (rotary-emb-base)."""
    return tuple(sorted({k for method in pattern_methods(pos_emb, layers) for k in extension_options(method)}))


def trained_choices(pos_emb: str, layers=None) -> tuple[str, ...]:
    """The per-run options of a model's methods (rotary-scaling): a run that sets one trains its weights with
    it, so its checkpoint is evaluated with it unless the evaluating config chooses another."""
    return tuple(sorted({k for method in pattern_methods(pos_emb, layers) for k in per_run_options(method)}))


def model_options(pos_emb: str, layers=None) -> list[str]:
    """The config keys a checkpoint must agree on for its methods: each method's checkpoint options."""
    return sorted({k for method in pattern_methods(pos_emb, layers) for k in checkpoint_options(method)})


def checkpoint_keys(pos_emb: str, layers=None) -> tuple[str, ...]:
    """The config keys a run may take from a checkpoint of method `pos_emb` (its model and tokenizer):
    every option of its methods except the per-run choices, which a run makes for itself."""
    methods = pattern_methods(pos_emb, layers)
    options = tuple(dict.fromkeys(o for m in methods for o in option_names(m) if o not in per_run_options(m)))
    return (tuple(k for k in ARCHITECTURE_KEYS if k != "padded_vocab_size") + TOKENIZER_FILES + options
            + tuple(k for k in model_options(pos_emb, layers) if k not in options))
