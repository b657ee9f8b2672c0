"""Positional methods, one file each, registered by name and selected by the `pos-emb` key.

Adding a method means adding one file here with one `@register("name")` class: every module of this
package is imported below, so the registry finds it without further edits (the `pos-emb` choices
in megatron/neox_arguments/groups.py must list it too; a test checks they agree).
"""
import importlib
import inspect
import pkgutil

from megatron.neox_arguments.groups import POS_EMB_ALIASES as ALIASES  # kerple_power_ap_, rpe
from megatron.neox_arguments.groups import POS_EMB_CHOICES

from .base import REGISTRY, PositionalEmbedding, PositionalEmbeddingError, register

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")


def available() -> tuple[str, ...]:
    """The registered method names, in the order of the config's `pos-emb` choices, then any others."""
    order = {name: i for i, name in enumerate(POS_EMB_CHOICES)}
    return tuple(sorted(REGISTRY, key=lambda name: (order.get(name, len(order)), name)))


def option_names(name: str) -> tuple[str, ...]:
    """The keyword options a method accepts (named like the config fields they come from)."""
    signature = inspect.signature(_lookup(name).__init__)
    return tuple(p.name for p in signature.parameters.values() if p.kind is p.KEYWORD_ONLY)


def _lookup(name: str) -> type[PositionalEmbedding]:
    canonical = ALIASES.get(name, name)
    if canonical not in REGISTRY:
        aliases = ", ".join(f"{a} = {c}" for a, c in ALIASES.items())
        raise PositionalEmbeddingError(
            f"unknown positional embedding '{name}' (config key `pos-emb`). Valid names: "
            f"{', '.join(available())} (aliases: {aliases}). Set `pos-emb` to one of them.")
    return REGISTRY[canonical]


def build_positional_embedding(name: str, num_heads: int, head_dim: int, hidden_size: int | None = None,
                               **options) -> PositionalEmbedding:
    """Build method `name` for `num_heads` heads of `head_dim` dims; options are its config fields."""
    cls = _lookup(name)
    unknown = sorted(set(options) - set(option_names(name)))
    if unknown:
        raise PositionalEmbeddingError(
            f"pos-emb '{cls.name}' got unknown option(s) {', '.join(unknown)}; it accepts: "
            f"{', '.join(option_names(name)) or 'no options'}.")
    return cls(num_heads, head_dim, hidden_size, **options)


def build_positional_embedding_from_args(neox_args) -> PositionalEmbedding:
    """Build the configured method, passing it the config fields named like its options."""
    options = {o: getattr(neox_args, o) for o in option_names(neox_args.pos_emb) if hasattr(neox_args, o)}
    return build_positional_embedding(
        neox_args.pos_emb, num_heads=neox_args.num_attention_heads,
        head_dim=neox_args.hidden_size // neox_args.num_attention_heads,
        hidden_size=neox_args.hidden_size, **options)


__all__ = ["ALIASES", "PositionalEmbedding", "PositionalEmbeddingError", "available",
           "build_positional_embedding", "build_positional_embedding_from_args", "option_names", "register"]
