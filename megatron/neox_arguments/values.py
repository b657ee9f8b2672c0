"""Reading one config value: a key's type checked (and gently converted) against its field, `--set`
overrides parsed, nested keys set, and the message for a key that does not exist."""
import difflib
import math
import typing
from typing import Literal, Union

from .errors import NeoXArgsError
from megatron.quoting import quote
from .yaml_loader import normalise_key, parse_value


# Megatron-LM's names for keys that GPT-NeoX (and so this project) spells otherwise: a user who writes
# one means that key, which spelling similarity alone does not find (`micro-batch-size` is closest to
# `eval-micro-batch-size`). Upstream NeoX's own keys are upstream_treatments.py's, never errors.
MEGATRON_SPELLINGS = {
    "micro_batch_size": "train_micro_batch_size_per_gpu",
    "global_batch_size": "train_batch_size",
    "ffn_hidden_size": "intermediate_size",
    "position_embedding_type": "pos_emb",
    "normalization": "norm",
    "lr_warmup_fraction": "warmup",
    "untie_embeddings_and_output_weights": "no_weight_tying",
    "tensor_model_parallel_size": "model_parallel_size",
    "pipeline_model_parallel_size": "pipe_parallel_size",
}


def _unknown_key_message(raw_key, where, known) -> str:
    dashed = {k.replace("_", "-"): k for k in known}
    key = normalise_key(raw_key)
    if key in MEGATRON_SPELLINGS:
        hint = (f" Did you mean '{MEGATRON_SPELLINGS[key].replace('_', '-')}'? (Megatron-LM's "
                f"{key.replace('_', '-')} is GPT-NeoX's {MEGATRON_SPELLINGS[key].replace('_', '-')}, as here.)")
    else:
        close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
        hint = f" Did you mean '{close[0].replace('_', '-')}'?" if close else ""
    return (f"{where}: {quote(str(raw_key))} is not a known config key.{hint} Fix or remove it; docs/config-reference.md "
            f"lists all {len(dashed)} keys.")


EXACT_FLOAT_INTEGERS = 2 ** 53  # every integer up to this has a float of its own; beyond, floats skip some
LARGEST_INTEGER = 2 ** 63 - 1    # an integer key's value ends up in torch, numpy or DeepSpeed's JSON as int64


def _coerce(key, value, hint, where):
    """Check (and gently convert) one value against its field's type annotation."""
    def wrong(expected):
        return NeoXArgsError(f"{where}: {key.replace('_', '-')} must be {expected}, got {quote(value)} "
                             f"({type(value).__name__}).")

    origin = typing.get_origin(hint)
    if origin is Union:
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        if value is None:
            return None
        return _coerce(key, value, inner[0], where)
    if origin is Literal:
        choices = typing.get_args(hint)
        if value not in choices:
            close = difflib.get_close_matches(value, [str(c) for c in choices], n=1) if isinstance(value, str) else []
            hint_text = f" Did you mean '{close[0]}'?" if close else ""
            raise NeoXArgsError(f"{where}: {key.replace('_', '-')} is {quote(value)}, which is not one of "
                                f"{list(choices)}.{hint_text}")
        return value
    if hint is bool:
        if not isinstance(value, bool):
            raise wrong("true or false")
        return value
    if hint is int:
        if isinstance(value, float) and value.is_integer() and abs(value) <= EXACT_FLOAT_INTEGERS:
            value = int(value)  # `train-iters: 1e5`
        elif isinstance(value, float) and value.is_integer():
            raise NeoXArgsError(f"{where}: {key.replace('_', '-')} must be an integer, got {quote(value)}, a float "
                                f"too large to hold one exactly (floats do up to 2^53 = {EXACT_FLOAT_INTEGERS:,}). "
                                "Write the integer you mean in digits.")
        if isinstance(value, bool) or not isinstance(value, int):
            raise wrong("an integer")
        if not -LARGEST_INTEGER - 1 <= value <= LARGEST_INTEGER:
            raise NeoXArgsError(f"{where}: {key.replace('_', '-')} must be an integer within +-{LARGEST_INTEGER:,} "
                                f"(a 64-bit integer, what torch, numpy and DeepSpeed hold), got {quote(value)}.")
        return value
    if hint is float:
        if isinstance(value, bool):
            raise wrong("a number")
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):  # "1e-5" given as a string; not "nan" or "inf", which are no setting
            try:
                if math.isfinite(number := float(value)):
                    return number
            except ValueError:
                pass
        raise wrong("a number")
    if hint is str:
        if isinstance(value, (dict, list)) or value is None or isinstance(value, bool):
            raise wrong("a string")
        return str(value)
    if hint is list:
        if isinstance(value, tuple):
            value = list(value)
        if not isinstance(value, list):
            raise wrong("a list")
        return value
    if hint is dict:
        if not isinstance(value, dict):
            raise wrong("a mapping")
        return value
    return value


def _set_nested(current, path, value, key):
    """`--set optimizer.params.lr=1e-3`: a copy of the nested dict with one leaf replaced."""
    if not isinstance(current, dict):
        raise NeoXArgsError(f"--set {quote(key)}: {quote(key.split('.')[0])} is not a mapping in the config, so it "
                            "has no nested keys to set.")
    out = dict(current)
    out[path[0]] = _set_nested(current.get(path[0], {}), path[1:], value, key) if len(path) > 1 else value
    return out


def parse_overrides(items) -> dict:
    """['key=value', ...] -> {key: value}, values read as YAML (so 10 is int, 1e-5 float)."""
    out = {}
    for item in items:
        if "=" not in item:
            raise NeoXArgsError(f"--set {quote(item)}: write overrides as KEY=VALUE, e.g. --set train-iters=100.")
        key, text = item.split("=", 1)
        if normalise_key(key) in out:  # as within one YAML file: one value per key, not "last wins"
            raise NeoXArgsError(f"--set {quote(item)} sets '{normalise_key(key).replace('_', '-')}' a second time "
                                "('-' and '_' are the same in config keys); give it once.")
        out[normalise_key(key)] = parse_value(text, f"--set {quote(item)}")
    return out


def as_tuple(values):
    """A list key as a tuple, for the frozen records the config package builds (to_*.py): no reader can change a
    list the config still holds."""
    return None if values is None else tuple(values)
