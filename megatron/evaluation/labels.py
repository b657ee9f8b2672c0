"""A run's labels, each in two forms: short, to name things (the `variant` in a result file's name: `layers-1a2b3c`,
`rotary+yarn8`), and readable, for people (a table's column, a figure's legend: `kerple_log + layers[alibi/w64,
kerple_log]`, `rotary + yarn ×8`). Both say what the run was trained with beyond its method (SWITCHES, read from
the checkpoint's own config), then what its evaluation chose per run (the method's per-run options, such as
rotary-scaling; attention-window, which the short form leaves to identity.Method).

The short forms name users' result files: a change to one renames every result already written.
"""
import dataclasses
import hashlib
import json
from typing import Any, Callable

Lookup = Callable[[str], Any]  # a config key -> its value


def value_of(config, key: str):
    """A key of NeoXArgs or of the config dict train.py stores in a checkpoint."""
    return config.get(key) if isinstance(config, dict) else getattr(config, key, None)


def _short_hash(value) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:6]


def _plain(given: dict) -> dict:
    return {str(k).replace("-", "_"): v for k, v in given.items()}


def _settings(given: dict, leave_out=()) -> str:
    rest = {k: v for k, v in _plain(given).items() if k not in leave_out}
    return "(" + ", ".join(f"{k}={v}" for k, v in sorted(rest.items())) + ")" if rest else ""


def _pattern_entry(entry: dict) -> str:
    entry = _plain(entry)
    text = str(entry.get("pos_emb", "run's"))
    if entry.get("attention_window"):
        text += f"/w{entry['attention_window']}"
    return text + _settings(entry, ("pos_emb", "attention_window")).replace(", ", ",")


def _method_options(pos_emb: str, get: Lookup) -> list[str]:
    from megatron.model.positional_embeddings import option_labels
    return option_labels(pos_emb, get)  # the options the method's registration labels, e.g. path's forget-gate


@dataclasses.dataclass(frozen=True)
class Switch:
    """A training switch that changes what a method's name stands for. It is on where the config's `key` has a
    value (not None, False, 0 or empty); `short` and `readable` make its two labels from that value and a lookup
    of the config's other keys. `readable` None: the short label reads as it is."""
    key: str
    short: Callable[[Any, Lookup], str | list[str]]
    readable: Callable[[Any, Lookup], str | list[str]] | None = None

    def labels(self, config) -> list[tuple[str, str]]:
        """(short, readable) of each label this switch gives `config`: none where it is off."""
        def get(key):
            return value_of(config, key)
        if not (value := get(self.key)):
            return []
        short = self.short(value, get)
        readable = short if self.readable is None else self.readable(value, get)
        return list(zip(short, readable)) if isinstance(short, list) else [(short, readable)]


# In the order the labels stand in. A new switch is one row here; its key must be one of NeoXArgs.trained_keys(),
# so that the config hash tells its runs apart too.
SWITCHES = (
    Switch("layer_pattern",  # hybrid layers: `layers-1a2b3c`, `layers[alibi/w64, kerple_log]`
           lambda pattern, _: "layers-" + _short_hash(pattern),
           lambda pattern, _: "layers[" + ", ".join(_pattern_entry(e) if isinstance(e, dict) else str(e)
                                                    for e in pattern) + "]"),
    Switch("attention_temperature",  # `ssmax`; with its settings `ssmax-1a2b3c`, `ssmax(init=0.5)`
           lambda given, _: str(_plain(given).get("type")) + (
               "" if set(_plain(given)) <= {"type"} else "-" + _short_hash(_plain(given))),
           lambda given, _: str(_plain(given).get("type")) + _settings(given, ("type",))),
    Switch("dape",  # `dape2-1a2b3c`, `dape2(hidden=32)`
           lambda given, _: f"dape{_plain(given).get('version')}-" + _short_hash(_plain(given)),
           lambda given, _: f"dape{_plain(given).get('version')}" + _settings(given, ("version",))),
    Switch("attention_output_gate", lambda gate, _: f"gate-{gate}", lambda gate, _: f"{gate} gate"),
    Switch("attention_sink", lambda _, __: "sink", lambda _, __: "attention sink"),
    Switch("rotary_unrotated_fraction",  # p-RoPE, p the rotated fraction
           lambda fraction, _: f"prope{1 - fraction:.4g}", lambda fraction, _: f"p-RoPE p={1 - fraction:.4g}"),
    Switch("random_positions", lambda limit, _: f"randpos{limit}", lambda limit, _: f"random positions <{limit}"),
    Switch("pose_target_length",  # PoSE: its target window and chunks
           lambda target, get: f"pose{target}x{get('pose_chunks') or 2}",
           lambda target, get: f"PoSE <{target} ({get('pose_chunks') or 2} chunks)"),
    Switch("length_schedule",  # lengths and windows over training time
           lambda schedule, _: "lensched-" + _short_hash([_plain(stage) if isinstance(stage, dict) else stage
                                                          for stage in schedule]),
           lambda _, __: "length schedule"),
    Switch("pos_emb", _method_options),
    Switch("reset_attention_mask",  # trained on documents masked from each other; positions restarting in each
           lambda _, get: "docpos" if get("reset_position_ids") else "docmask"),
)


def switch_labels(config) -> list[str]:
    """The short labels of the switches `config` (NeoXArgs or the config dict a checkpoint stores) trains with."""
    return [short for switch in SWITCHES for short, _ in switch.labels(config)]


def trained_parts(trained) -> list[str]:
    """The readable labels of the switches `trained` (NeoXArgs or a checkpoint's config dict) trains with."""
    return [readable for switch in SWITCHES for _, readable in switch.labels(trained)]


def _option_labels(per_run_options: dict) -> list[tuple[str, str]]:
    """(short, readable) of each per-run option that is set ({key: value}): a scaling such as rotary-scaling
    {type: yarn, factor: 8} is `yarn8` / `yarn ×8`, with its other settings hashed / spelled out; any other
    option is `key=value`."""
    labels = []
    for name, value in per_run_options.items():
        if value is None:
            continue
        if isinstance(value, dict) and "type" in value:
            factor = value.get("factor", "")
            number = isinstance(factor, (int, float))
            rest = {k: v for k, v in value.items() if k not in ("type", "factor")}
            short = f"{value['type']}{factor:g}" if number else f"{value['type']}{factor}"
            if rest:  # other settings: distinct runs get distinct labels
                short += "-" + _short_hash(rest)
            readable = str(value["type"]) + (f" ×{factor:g}" if number else "") + _settings(rest)
        else:
            short = readable = f"{name.replace('_', '-')}={value}"
        labels.append((short, readable))
    return labels


def variant(trained, per_run_options: dict) -> str | None:
    """The switches that change the model a method's name stands for (`switch_labels` of `trained`, the training
    config) and the method's per-run options that are set ({key: value}, e.g. rotary-scaling: `yarn8`), as a short
    label, so a run scored with them never shares a result file or a table row with the plain run."""
    return "+".join(switch_labels(trained) + [short for short, _ in _option_labels(per_run_options)]) or None


def evaluated_parts(per_run_options: dict, window) -> list[str]:
    """What the evaluation chose per run: the method's per-run options ({key: value}: `yarn ×8`) and
    attention-window."""
    return [readable for _, readable in _option_labels(per_run_options)] + ([f"window {window}"] if window else [])


def readable_label(pos_emb: str, trained_parts: list[str], evaluated_parts: list[str],
                   run_name: str | None = None) -> str:
    """The run's name (or its method and training switches), then its per-run evaluation choices."""
    return " + ".join([run_name] if run_name else [pos_emb, *trained_parts]) + "".join(
        f" + {part}" for part in evaluated_parts)
