"""Positional methods, one file each, registered by name and selected by the `pos-emb` key.

Adding a method means adding one file here with one `@register("name")` class (docs/positional-methods.md, "Adding a
method"): every module of this package is imported below, and the config's `pos-emb` choices and
option keys, the config reference and the checkpoint check are read from the registry.
"""
import dataclasses
import importlib
import pkgutil

from .base import (ModelShape, Option, OptionError, PositionalEmbedding, PositionalEmbeddingError, fraction,
                   option, positive)
from .registry import ALIASES, OPTIONS, REGISTRY, register

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")

# The KERPLE paper's order, for listings (the `pos-emb` help, figure colours); a method not named
# here follows, alphabetically. Naming a method here registers nothing.
LISTING_ORDER = ("kerple_log", "kerple_power", "kerple_log3", "kerple_bias_weight", "alibi", "t5", "rotary",
                 "sinusoidal", "learned", "none", "mep", "mep_kerple", "fire", "sandwich", "xpos")


def available() -> tuple[str, ...]:
    """The registered method names, in listing order."""
    order = {name: i for i, name in enumerate(LISTING_ORDER)}
    return tuple(sorted(REGISTRY, key=lambda name: (order.get(name, len(order)), name)))


def lookup(name: str) -> type[PositionalEmbedding]:
    """The class of method `name` (or of an alias)."""
    canonical = ALIASES.get(name, name)
    if canonical not in REGISTRY:
        aliases = ", ".join(f"{a} = {c}" for a, c in ALIASES.items())
        raise PositionalEmbeddingError(
            f"unknown positional embedding '{name}' (config key `pos-emb`). Valid names: "
            f"{', '.join(available())} (aliases: {aliases}). Set `pos-emb` to one of them.")
    return REGISTRY[canonical]


def option_names(name: str) -> tuple[str, ...]:
    """The options method `name` declares (each is a config key of the same name)."""
    return tuple(f.name for f in dataclasses.fields(lookup(name).Options))


def declared_options() -> list:
    """Every option of every method, in listing order of the first method that declares it."""
    seen = {}
    for name in available():
        for option_name in option_names(name):
            seen.setdefault(option_name, OPTIONS[option_name])
    return list(seen.values())


def per_run_options(name: str) -> tuple[str, ...]:
    """Options of method `name` chosen per run (e.g. rotary-scaling): they change the scores, not the
    weights, so results carry them in their identity while checkpoints need not agree on them."""
    return tuple(o for o in option_names(name) if OPTIONS[o].spec.per_run)


def extension_options(name: str) -> tuple[str, ...]:
    """Checkpoint options of method `name` a fine-tune may change (rotary-emb-base): they shape no parameter."""
    return tuple(o for o in option_names(name) if OPTIONS[o].spec.extendable)


def option_labels(name: str, values) -> list[str]:
    """The labels of method `name`'s labelled options whose value in `values` (a key -> value lookup) is
    not their default: `forget-gate`, or `label=value` for a non-boolean value."""
    if name not in REGISTRY and name not in ALIASES:
        return []
    labels = []
    for option_name in option_names(lookup(name).name):
        declared = OPTIONS[option_name]
        value = values(option_name)
        if declared.spec.label and value is not None and value != declared.default:
            labels.append(declared.spec.label if value is True else f"{declared.spec.label}={value}")
    return labels


def checkpoint_options(name: str) -> tuple[str, ...]:
    """The config keys a checkpoint of method `name` must agree on: its options that shape or define
    the trained parameters (not those that only set their initial values, nor per-run choices)."""
    cls = lookup(name)
    keys = tuple(o for o in option_names(name) if not (OPTIONS[o].spec.init_only or OPTIONS[o].spec.per_run))
    return keys + (("max_position_embeddings",) if cls.uses_max_positions else ())


def make_options(name: str, values: dict):
    """Method `name`'s Options from {option: value}; unknown names and bad values are errors."""
    cls = lookup(name)
    unknown = sorted(set(values) - set(option_names(name)))
    if unknown:
        raise PositionalEmbeddingError(
            f"pos-emb '{cls.name}' got unknown option(s) {', '.join(unknown)}; it accepts: "
            f"{', '.join(option_names(name)) or 'no options'}.")
    for key, value in values.items():
        check = OPTIONS[key].spec.check
        problem = check(value) if check and value is not None else None
        if problem:
            raise OptionError(key, problem)
    return cls.Options(**values)  # its __post_init__ checks options against each other


def build_positional_embedding(name: str, num_heads: int, head_dim: int, hidden_size: int | None = None, *,
                               max_position_embeddings: int | None = None, init_method_std: float = 0.02,
                               **options) -> PositionalEmbedding:
    """Build method `name` for `num_heads` heads of `head_dim` dims; options (and the two model keys
    a position table needs) by their config names."""
    shape = ModelShape(num_heads, head_dim, hidden_size, max_position_embeddings, init_method_std)
    return lookup(name)(shape, make_options(name, options))


__all__ = ["ALIASES", "LISTING_ORDER", "ModelShape", "Option", "OptionError", "PositionalEmbedding",
           "PositionalEmbeddingError", "available", "build_positional_embedding",
           "checkpoint_options", "declared_options", "fraction",
           "lookup", "make_options", "option", "option_names", "positive", "register"]
