"""`layer-pattern`: each layer's positional method, its options and its attention window (hybrid layers).

The pattern is a list of entries repeated over the layers (layer i takes entry i mod its length, so
26 layers of a 6-entry pattern end part-way through it). An entry may set `pos-emb`, `attention-window`
and any option of its method; what it leaves out is the run's value of that key:

    layer-pattern:                        # Llama 4 / SmolLM3: no positions on every 4th layer
      - {pos-emb: rotary}
      - {pos-emb: rotary}
      - {pos-emb: rotary}
      - {pos-emb: none}

The config package reads the list once (`parse_pattern`, from to_model.py, and from a checkpoint's record in
ModelConfig.from_record) into typed entries, `Layer`, which `ModelConfig.layers` holds; everything below reads
those. What an entry leaves out is filled in from the model when its layers are asked for (`layer_kinds`), so
a run's own window or rotary-scaling reaches the layers that leave it to the run.

Layers of the same kind (equal entries once filled in) share one positional module, as the paper's
layers share one set of KERPLE parameters; `pos-emb-per-layer` gives every layer its own. Unset, every
layer is the run's `pos-emb` with the run's `attention-window`: the model of a plain config, unchanged.
"""
import enum
import json
from dataclasses import dataclass, field

from megatron.errors import NeoXArgsError
from megatron.model.positional_embeddings import (ModelShape, OptionError, PositionalEmbedding, lookup, make_options,
                                                  option_names)
from megatron.model.positional_embeddings.registry import OPTIONS
from megatron.model.positional_embeddings.dape import dape_problem, daped
from megatron.model.positional_embeddings.temperature import temperature_problem, tempered
from megatron.quoting import quote

WINDOW_KEY = "attention_window"
TEMPERATURE_KEY = "attention_temperature"
DAPE_KEY = "dape"


class LayerPatternError(NeoXArgsError):
    """A bad `layer-pattern`; `key` names the config key, so the config can point at the file and line."""
    key = "layer_pattern"


class Unset(enum.Enum):
    """A key an entry leaves out: the model's value (an enum member stays itself when copied or pickled)."""
    INHERIT = "the model's value"


INHERIT = Unset.INHERIT


@dataclass(frozen=True)
class Layer:
    """One entry of `layer-pattern`, typed: what the entry sets. What it leaves out (`pos_emb` None, a field at
    INHERIT, an option missing from `options`) is the model's value: `Layer(pos_emb="none")` is a layer without
    positions and with the model's window; `Layer(window=512, options={"rotary_emb_base": 10000})` the model's
    method with its own window and base. Two entries are equal when they set the same values."""
    pos_emb: str | None = None
    window: int | None | Unset = INHERIT  # None: every earlier token
    options: dict = field(default_factory=dict)  # {config key: value} of the method's options it sets
    temperature: dict | None | Unset = INHERIT  # attention-temperature (positional_embeddings/temperature.py)
    dape: dict | None | Unset = INHERIT  # dape (positional_embeddings/dape.py)
    # The entry as a config file spelled it (the checkpoint record and the Hugging Face config.json keep it as
    # written); a literal's is its values in the config's spelling.
    written: dict | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        if self.written is None:
            set_keys = {"pos_emb": self.pos_emb, WINDOW_KEY: self.window, TEMPERATURE_KEY: self.temperature,
                        DAPE_KEY: self.dape}
            given = {k: v for k, v in set_keys.items() if v is not INHERIT and not (k == "pos_emb" and v is None)}
            object.__setattr__(self, "written", {k.replace("_", "-"): v for k, v in {**given, **self.options}.items()})

    def without(self, keys) -> "Layer":
        """This entry with the config keys `keys` left to the model (options, attention_window)."""
        return Layer(self.pos_emb, INHERIT if WINDOW_KEY in keys else self.window,
                     {k: v for k, v in self.options.items() if k not in keys}, self.temperature, self.dape,
                     {k: v for k, v in self.written.items() if str(k).replace("-", "_") not in keys})


@dataclass(frozen=True)
class LayerKind:
    """What one layer's attention is: a method with all its options, and a window (None: every key)."""
    pos_emb: str
    window: int | None
    options_json: str  # the method's options, {config key: value} as sorted JSON: hashable and comparable
    temperature_json: str = "null"  # attention-temperature (positional_embeddings/temperature.py), as JSON
    dape_json: str = "null"  # dape (positional_embeddings/dape.py), as JSON

    @property
    def options(self) -> dict:
        return json.loads(self.options_json)

    @property
    def temperature(self) -> dict | None:
        return json.loads(self.temperature_json)

    @property
    def dape(self) -> dict | None:
        return json.loads(self.dape_json)

    def describe(self) -> str:
        """`rotary (rotary-emb-base 1000000), window 512`: the options away from their defaults."""
        given = ", ".join(f"{k.replace('_', '-')} {quote(v)}" for k, v in self.options.items()
                          if v != OPTIONS[k].default)
        return (f"{self.pos_emb}" + (f" ({given})" if given else "")
                + (f", window {self.window}" if self.window is not None else "")
                + (f", temperature {quote(self.temperature)}" if self.temperature is not None else "")
                + (f", dape {quote(self.dape)}" if self.dape is not None else ""))


def normalise(entry) -> dict:
    """An entry as {config key with underscores: value}; anything but a mapping as it is, for parse_pattern's
    check to name it (a list, a string, null)."""
    if not isinstance(entry, dict):
        return entry
    return {str(key).replace("-", "_"): value for key, value in entry.items()}


def pattern_problem(pattern) -> str | None:
    """Why `pattern` is not a pattern at all (not a non-empty list), or None."""
    if isinstance(pattern, list) and pattern:
        return None
    return (f"is {quote(pattern)}; give a non-empty list of entries such as [{{pos-emb: rotary}}, {{pos-emb: none}}], "
            "or null for every layer the same.")


def parse_pattern(pattern, config) -> tuple[Layer, ...] | None:
    """`layer-pattern` as a config file or a checkpoint's record gives it (a list of mappings; None: no pattern)
    as typed entries, each checked against model `config` (a ModelConfig without layers: the method, options,
    window, temperature and dape an entry leaves out). The one place the list is read; refused with a
    LayerPatternError that names the entry."""
    if pattern is None:
        return None
    if (problem := pattern_problem(pattern)) is not None:
        raise LayerPatternError(problem)
    layers, kinds = [], []
    for index, written in enumerate(pattern):
        layers.append(_entry(written, index, len(pattern)))
        kinds.append(_kind(layers[-1], config, index, len(pattern)))
    _check_mix(kinds)
    return tuple(layers)


def _entry(written, index: int, count: int) -> Layer:
    """Entry `index` of a pattern of `count`, typed (`_kind` checks it against the model)."""
    entry = normalise(written)
    if not isinstance(entry, dict):
        raise LayerPatternError(f"{_where(index, count)} is {quote(entry)}; each entry is a mapping such as "
                                "{pos-emb: rotary, attention-window: 512, rotary-emb-base: 10000}.")
    pos_emb = None
    if "pos_emb" in entry:
        try:
            pos_emb = lookup(entry["pos_emb"]).name
        except NeoXArgsError as err:
            raise LayerPatternError(f"{_where(index, count)}: {err}") from None
    return Layer(pos_emb, entry.get(WINDOW_KEY, INHERIT),
                 {k: v for k, v in entry.items() if k not in ("pos_emb", WINDOW_KEY, TEMPERATURE_KEY, DAPE_KEY)},
                 entry.get(TEMPERATURE_KEY, INHERIT), entry.get(DAPE_KEY, INHERIT), written)


def layer_kinds(config) -> list[LayerKind]:
    """Every layer's kind, in order (`config`: a ModelConfig): its `layers` with what each leaves out filled in
    from the model, or the model's method and window for each."""
    entries = config.layers or (Layer(),)
    kinds = [_kind(layer, config, index, len(entries)) for index, layer in enumerate(entries)]
    if config.layers:
        _check_mix(kinds)
    return [kinds[i % len(kinds)] for i in range(config.num_layers)]


def _where(index: int, count: int) -> str:
    return f"entry {index + 1} of {count}"


def _kind(layer: Layer, config, index: int, count: int) -> LayerKind:
    """The kind of layer entry `layer` in model `config`, refused where the two do not fit together."""
    where = _where(index, count)
    try:
        name = lookup(layer.pos_emb or config.pos_emb).name
    except NeoXArgsError as err:
        raise LayerPatternError(f"{where}: {err}") from None
    accepted = set(option_names(name))
    unknown = sorted(set(layer.options) - accepted)
    if unknown:
        raise LayerPatternError(
            f"{where} sets {', '.join(k.replace('_', '-') for k in unknown)}, which pos-emb {name!r} does not take; "
            f"an entry takes pos-emb, attention-window, attention-temperature, dape and the options of its method "
            f"({', '.join(o.replace('_', '-') for o in sorted(accepted)) or 'none for this method'}).")
    window = config.attention.window if layer.window is INHERIT else layer.window
    if window is not None and (isinstance(window, bool) or not isinstance(window, int) or window < 1):
        raise LayerPatternError(f"{where}: attention-window is {quote(window)}; it must be a positive number of "
                                "tokens, or null for every earlier token.")
    temperature = config.attention_temperature if layer.temperature is INHERIT else layer.temperature
    if (problem := temperature_problem(temperature)) is not None:
        raise LayerPatternError(f"{where}: attention-temperature {problem}")
    dape = config.dape if layer.dape is INHERIT else layer.dape
    if (problem := dape_problem(dape)) is not None:
        raise LayerPatternError(f"{where}: dape {problem}")
    if "score_rewrite" in lookup(name).channels and (temperature is not None or dape is not None):
        raise LayerPatternError(
            f"{where}: pos-emb {name!r} rewrites the score matrix itself; "
            f"{'attention-temperature' if temperature is not None else 'dape'} cannot wrap it (its q-scaling or "
            "score edit would change the method's own reading of the scores). Remove it for this method.")
    options = {key: layer.options[key] if key in layer.options else config.option(key) for key in option_names(name)}
    try:
        make_options(name, options)
    except OptionError as err:
        raise LayerPatternError(f"{where}: {err}") from None
    return LayerKind(name, window, json.dumps(options, sort_keys=True), json.dumps(temperature, sort_keys=True),
                     json.dumps(dape, sort_keys=True))


def _check_mix(kinds: list[LayerKind]) -> None:
    """Every method of a pattern acts inside attention: one that adds positions to the token embeddings
    does so once, before the first layer, so it cannot be one layer's choice."""
    for index, kind in enumerate(kinds):
        if lookup(kind.pos_emb).add_to_embeddings is not PositionalEmbedding.add_to_embeddings:
            raise LayerPatternError(
                f"entry {index + 1}: pos-emb {kind.pos_emb!r} adds positions to the token embeddings "
                "once, before the first layer, so it cannot be the choice of some layers. Use methods that act "
                "inside attention in a pattern (rotary, none, alibi, kerple_*, t5, fire, ...).")


def pattern_methods(pos_emb: str, layers) -> tuple[str, ...]:
    """The methods a model of `pos-emb` and `layers` uses (the run's first), each once. `layers`: a
    ModelConfig's typed entries, or a pattern as a config gives it before it is checked (a stored config,
    the run's own keys): only the methods are read, and anything but a list of mappings is left to
    parse_pattern to refuse with a reason."""
    if isinstance(layers, tuple) and all(isinstance(layer, Layer) for layer in layers):
        named = [layer.pos_emb or pos_emb for layer in layers]
    else:
        entries = layers if isinstance(layers, list) else ()
        named = [normalise(entry).get("pos_emb", pos_emb) for entry in entries if isinstance(entry, dict)]
    return tuple(dict.fromkeys([lookup(pos_emb).name] + [lookup(name).name for name in named]))


def per_layer_modules(config) -> bool:
    """One positional module per layer: `pos-emb-per-layer`, or a method whose parameters are each layer's
    own (`per_layer`: fox's forget gate, computed from that layer's hidden states; the paper gives every
    layer its gate). Then every layer gets its module, whatever the method of the others."""
    return bool(config.pos_emb_per_layer) or any(lookup(kind.pos_emb).per_layer for kind in layer_kinds(config))


def build_kind(kind: LayerKind, config) -> PositionalEmbedding:
    """The positional module of one layer kind of model `config`."""
    shape = ModelShape(config.num_attention_heads, config.hidden_size // config.num_attention_heads,
                       config.hidden_size, config.max_position_embeddings, config.init_method_std)
    return daped(tempered(lookup(kind.pos_emb)(shape, make_options(kind.pos_emb, kind.options)), kind.temperature),
                 kind.dape)


def positional_parameter_count(config) -> int:
    """Parameters of the positional modules (cope's table, FIRE's MLP, T5's buckets, ...), counted on the meta
    device: the config's sizes (cope-max-positions: 1e9) are checked against memory before anything is
    allocated from them. Methods that add a table to the embeddings (`learned`) are the caller's to count."""
    import torch
    kinds, per_layer = layer_kinds(config), per_layer_modules(config)
    modules = kinds if per_layer else list(dict.fromkeys(kinds))
    with torch.device("meta"):
        return sum(p.numel() for kind in modules if not lookup(kind.pos_emb).uses_max_positions
                   for p in build_kind(kind, config).parameters())


def describe_layers(config) -> str:
    """Each layer's kind and positional module, one line each (`deepy.py --dry-run`)."""
    kinds, per_layer = layer_kinds(config), per_layer_modules(config)
    modules = kinds if per_layer else list(dict.fromkeys(kinds))
    return "\n".join(f"layer {i:<4}{kind.describe():<60}# positional module "
                     f"{i if per_layer else modules.index(kind)}" for i, kind in enumerate(kinds))


def rewrites_scores(config) -> bool:
    """Some layer's method rewrites the score matrix (cope, or a `dape` wrapper): it runs only where the
    scores are written out, so `--dry-run` shows the strategy and its memory."""
    return any("score_rewrite" in lookup(kind.pos_emb).channels or kind.dape is not None for kind in layer_kinds(config))


def training_plans(config, seq_length: int, batch: int, documents: bool) -> list[str]:
    """Each positional module's attention strategy at `seq_length` in training on this machine's CPU (micro-batch
    `batch`, packed `documents` masked or not), and the memory that strategy estimates for one layer's forward
    (`--dry-run`; GPU ranks may choose otherwise: `auto` prefers other strategies on CUDA)."""
    import torch

    from megatron.model.attention import AttentionInputs
    from megatron.model.attention.choice import choose_strategy, memory_budget_bytes, on_cuda

    kinds, attention = list(dict.fromkeys(layer_kinds(config))), config.attention
    positions = torch.arange(seq_length)
    lines = []
    for index, kind in enumerate(kinds):
        pe = build_kind(kind, config)
        # With gradients, as in training: whether a table takes one decides the strategy (table gradients).
        bias, weight = pe.distance_tables_at(positions, seq_length) or (None, None)
        inputs = AttentionInputs.describe(
            pe, positions, bias, weight, window=kind.window, block_size=attention.block_size,
            needs_grad=True, dropout_p=attention.dropout, dtype=torch.float32, batch=batch, documents=documents,
            sink=bool(config.attention_sink))
        strategy = choose_strategy(attention.impl, inputs, memory_budget_bytes(positions.device, attention.memory_budget_mb))
        cuda = on_cuda(attention.impl, inputs)  # a CUDA-only strategy (fla's kernels), which the CPU never takes
        lines.append(f"positional module {index} ({kind.describe()}): {strategy.name}, about "
                     f"{strategy.memory_bytes(inputs) / 2**20:.1f} MB per layer beyond q, k, v"
                     + ("" if cuda is None else f"; {cuda}"))
    return lines
