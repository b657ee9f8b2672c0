"""Read upstream GPT-NeoX and KERPLE-fork configs as they are: apply each upstream key's treatment
(upstream_treatments.py) before validation, and say once what had no effect.

`translate(values, sources, known)` is called once by NeoXArgs.from_dict. It returns the values in this
project's keys and the notes for the start-up notice; a refused key is a NeoXArgsError naming the
file and line. Keys upstream never had pass through untouched, so a typo still gets its did-you-mean.
"""
import json
import pathlib
from dataclasses import dataclass

from .errors import NeoXArgsError
from megatron.quoting import quote
from .upstream_treatments import IGNORED, MAPPED, REFUSED, VALUE_MAPPED
from .yaml_loader import normalise_key

DOC = "docs/upstream-keys.md"
_DATA = json.loads((pathlib.Path(__file__).with_name("upstream_keys.json")).read_text())
UPSTREAM_KEYS: dict = _DATA["keys"]
IGNORED_REASON = {key: reason for reason, keys in IGNORED.items() for key in keys}
REFUSED_OFF = {key: (reason, off) for reason, keys in REFUSED.items() for key, off in keys.items()}
FLAT_ATTENTION = ("global", "flash")  # `flash`: the same global attention, another kernel


@dataclass(frozen=True)
class Note:
    key: str       # as the user spelled it
    where: str     # file:line
    reason: str    # why it has no effect, or what it became


def dashed(key: str) -> str:
    return key.replace("_", "-")


def translate(values: dict, sources: dict, known):
    """(values, sources, notes): upstream keys turned into this project's, ignored ones dropped.
    `known`: this project's keys (normalised), which pass through as they are."""
    out, sources, notes = {}, dict(sources), []
    norm = {normalise_key(raw): raw for raw in values}
    mapped = []
    for key, raw in norm.items():
        value, where = values[raw], sources.get(key, "the given config")
        if key in known:
            out[raw] = VALUE_MAPS[key](value, where) if key in VALUE_MAPS and value is not None else value
        elif key in MAPPED:
            mapped.append((key, raw, value, where))
        elif key in IGNORED_REASON:
            notes.append(Note(raw, where, IGNORED_REASON[key]))
        elif key in REFUSED_OFF:
            reason, off = REFUSED_OFF[key]
            if not any(_same(value, o) for o in off):
                raise NeoXArgsError(
                    f"{where}: '{raw}: {quote(value, as_json=True)}' asks for {reason}, which this project does not "
                    f"support; ignoring it would silently train or evaluate something else. Remove the key "
                    f"or set it to {quote(off[0], as_json=True)} (off). {DOC} lists every upstream key's treatment.")
            notes.append(Note(raw, where, f"off ({quote(value, as_json=True)}); {reason} is not supported here"))
        else:
            out[raw] = value  # this project's own key, or a mistake: NeoXArgs reports it
    for key, raw, value, where in mapped:
        notes.extend(MAPPERS[key](raw, value, where, out, sources))
    _fix_values(out, sources, notes)
    return out, sources, notes


def _same(value, off) -> bool:
    if isinstance(off, bool) or isinstance(value, bool):
        return value is off
    return value == off


def _get(out: dict, key: str):
    for raw, value in out.items():
        if normalise_key(raw) == key:
            return raw, value
    return None, None


# ------------------------------------------------------------------------------------ mapped keys
COMMAND_LINE = "command line"  # the source of a --set value, which beats every file


def _save_interval(raw, value, where, out, sources):
    own, current = _get(out, "checkpoint_factor")
    own_where = sources.get("checkpoint_factor")
    if own is not None and current != value:
        if where == COMMAND_LINE and own_where != COMMAND_LINE:  # --set save-interval beats the file's value
            out[own] = value
            sources["checkpoint_factor"] = f"{where} (as {raw})"
            return [Note(raw, where, f"mapped to checkpoint-factor (replacing {quote(current)} of {own_where})")]
        if own_where == COMMAND_LINE and where != COMMAND_LINE:
            return [Note(raw, where, "checkpoint-factor given on the command line replaces it")]
        raise NeoXArgsError(f"{where}: '{raw}: {quote(value)}' disagrees with checkpoint-factor {quote(current)} "
                            f"({own_where}), and they are the same key: save-interval is the KERPLE fork's name for "
                            "checkpoint-factor. Keep one of them, preferably checkpoint-factor (this project's and "
                            "upstream GPT-NeoX's name).")
    out.setdefault(own or "checkpoint_factor", value)
    sources.setdefault("checkpoint_factor", f"{where} (as {raw})")
    return [Note(raw, where, "mapped to checkpoint-factor")]


def _lr_decay_fraction(raw, value, where, out, sources):
    if value is None:
        return [Note(raw, where, "null: lr-decay-iters decides")]
    own, iters = _get(out, "train_iters")
    if not isinstance(value, (int, float)) or not 0 < value <= 1 or not isinstance(iters, int):
        raise NeoXArgsError(f"{where}: {raw} must be a number in (0, 1] and needs train-iters set, got {quote(value)} "
                            f"and train-iters {quote(iters)}.")
    decay_raw, decay = _get(out, "lr_decay_iters")
    if decay is not None:
        raise NeoXArgsError(f"{where}: {raw} and lr-decay-iters ({sources.get('lr_decay_iters')}) both set the "
                            "decay length; keep one of them.")
    out[decay_raw or "lr_decay_iters"] = round(value * iters)
    sources["lr_decay_iters"] = f"{where} (as {raw} x train-iters)"
    return [Note(raw, where, f"mapped to lr-decay-iters {round(value * iters)}")]


def attention_types(value, num_layers):
    """The attention types upstream's [[[types], count | "all"], ...] gives the layers (not expanded per
    layer: a count may be any size)."""
    used = set()
    for entry in value or []:
        if not (isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], (list, tuple))):
            raise ValueError(f"{quote(entry)} is not [[types], count]")
        types, count = entry
        count = num_layers if count == "all" else count
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            raise ValueError(f"count {quote(count)} is neither a positive integer nor \"all\"")
        if not types or not all(isinstance(t, str) for t in types):
            raise ValueError(f"types {quote(types)} is not a non-empty list of names")
        used.update(types[:count])
    return used


def _attention_config(raw, value, where, out, sources):
    num_layers = _get(out, "num_layers")[1] or 12
    try:
        types = attention_types(value, num_layers)
    except ValueError as err:
        raise NeoXArgsError(f"{where}: {raw}: {err}. Write it as upstream does, e.g. [[[\"global\"], \"all\"]].")
    other = sorted(types - set(FLAT_ATTENTION))
    if other:
        raise NeoXArgsError(
            f"{where}: {raw} gives some layers {quote(other)} attention, which this project does not support: every "
            f"layer here has global (full causal) attention with the configured pos-emb; a sparse, local, gMLP, "
            f"RWKV or Mamba layer would be silently replaced by it. Use [[[\"global\"], \"all\"]] or remove the "
            f"key (attention-window masks distant keys in every layer, if that is what you want).")
    # All global: no effect, whatever the count (so `--set num-layers=2` works on a 12-layer config).
    return [Note(raw, where, "every layer global: the only attention here, so no effect")]


def _rms_norm_epsilon(raw, value, where, out, sources):
    norm = _get(out, "norm")[1] or "layernorm"
    if norm != "rmsnorm":
        return [Note(raw, where, f"norm is {quote(norm)}, so upstream would not read it either")]
    own, current = _get(out, "layernorm_epsilon")
    if own is not None and current != value:
        raise NeoXArgsError(f"{where}: {raw} {quote(value)} and layernorm-epsilon {quote(current)} both set the "
                            "rmsnorm epsilon here; keep one of them.")
    out[own or "layernorm_epsilon"] = value
    sources.setdefault("layernorm_epsilon", f"{where} (as {raw})")
    return [Note(raw, where, "mapped to layernorm-epsilon (norm is rmsnorm)")]


def _to_deepspeed(raw, value, where, out, sources):
    own, extra = _get(out, "deepspeed_extra_args")
    extra = dict(extra or {})
    key = normalise_key(raw)
    if key in extra and extra[key] != value:
        raise NeoXArgsError(f"{where}: {raw} is also set in deepspeed-extra-args to a different value; keep one.")
    if value is not None:
        extra[key] = value
    out[own or "deepspeed_extra_args"] = extra
    sources.setdefault("deepspeed_extra_args", where)
    return [Note(raw, where, "passed to DeepSpeed's JSON (via deepspeed-extra-args)")]


_OWN_MAPPERS = {"save_interval": _save_interval, "lr_decay_fraction": _lr_decay_fraction,
                "attention_config": _attention_config, "rms_norm_epsilon": _rms_norm_epsilon}
MAPPERS = {key: _OWN_MAPPERS.get(key, _to_deepspeed) for key in MAPPED}  # the rest go to DeepSpeed's JSON


# ------------------------------------------------------------------------ implemented keys' values
def _precision(value, where):
    return "bf16" if value == "bfloat16" else value


def _pipe_parallel_size(value, where):
    return 1 if value == 0 else value


def _data_impl(value, where):
    return "mmap" if value == "infer" else value


def _pos_emb(value, where):
    fork = {"kerple_power_ap_ap": "kerple_bias_weight", "kerple_power_original": "alibi"}
    if value == "kerple_power__ap":
        raise NeoXArgsError(f"{where}: pos-emb kerple_power__ap (the fork's weight-only kernel, no bias) is not "
                            "implemented here; kerple_bias_weight has both the bias and the weight kernel.")
    return fork.get(value, value) if isinstance(value, str) else value  # not a name: NeoXArgs says so


def _fp16(value, where):
    # Pythia's configs repeat `fp16: true` inside the fp16 dict; DeepSpeed's schema refuses the stray key.
    if isinstance(value, dict) and "fp16" in value:
        return {k: v for k, v in value.items() if k != "fp16"}
    return value


VALUE_MAPS = {"fp16": _fp16, "precision": _precision, "pipe_parallel_size": _pipe_parallel_size, "data_impl": _data_impl,
              "pos_emb": _pos_emb}
VALUE_MAPS_NULL = {"use_wandb": False}  # upstream's null default of a boolean


def _fix_values(out, sources, notes):
    """The fork's `fp16: {enabled: true, type: bfloat16}` means bf16 training; upstream's `use_wandb: null`
    means false."""
    raw, fp16 = _get(out, "fp16")
    if isinstance(fp16, dict) and fp16.get("type") == "bfloat16":
        del out[raw]
        where = sources.pop("fp16", "the given config")
        if fp16.get("enabled", False):
            own_bf16, bf16 = _get(out, "bf16")
            out[own_bf16 or "bf16"] = {**(bf16 or {}), "enabled": True}
            sources.setdefault("bf16", f"{where} (as fp16.type: bfloat16)")
            notes.append(Note(raw, where, "fp16 with type bfloat16 = bf16: {enabled: true} (loss-scale "
                                          "fields have no use in bf16)"))
    for key, default in VALUE_MAPS_NULL.items():
        raw, value = _get(out, key)
        if raw is not None and value is None:
            out[raw] = default


def merge_deepspeed_extra(config: dict, extra: dict | None, where: str) -> dict:
    """The DeepSpeed JSON with deepspeed-extra-args merged in; an entry this project already derives
    (batch sizes, precision, ZeRO, ...) may only repeat the derived value."""
    for key, value in (extra or {}).items():
        if key in config and config[key] != value:
            raise NeoXArgsError(
                f"{where}: deepspeed-extra-args sets {key} to {quote(value, as_json=True)}, but the config already "
                f"gives DeepSpeed {quote(config[key], as_json=True)} for it; set it through the config key instead.")
        config[key] = value
    return config


def notice(notes) -> str | None:
    """One paragraph per reason: what the upstream keys of this config did."""
    if not notes:
        return None
    by_reason = {}
    for note in notes:
        by_reason.setdefault(note.reason, []).append(f"{dashed(note.key)} ({note.where})")
    lines = [f"note: {len(notes)} upstream GPT-NeoX / KERPLE-fork config key(s) were translated or have no "
             f"effect here (every key's treatment: {DOC}):"]
    lines += [f"  - {', '.join(keys)}: {reason}" for reason, keys in by_reason.items()]
    return "\n".join(lines)
