"""The registry: method name -> class, its aliases, and every option any method declares.

An option key is one config key whoever declares it: two methods may share a key only by sharing
its declaration (e.g. `mep_kerple`'s Options inherit `t5`'s), so a key cannot have two defaults.
"""
import dataclasses
import typing

from .base import Option, PositionalEmbedding, PositionalEmbeddingError

REGISTRY: dict[str, type[PositionalEmbedding]] = {}
ALIASES: dict[str, str] = {}  # other spellings (the KERPLE fork's, upstream NeoX's) -> name


@dataclasses.dataclass(frozen=True)
class DeclaredOption:
    name: str
    type: object
    default: object
    spec: Option
    owner: str  # the first method that declared it, for error messages

    def same_declaration(self, other: "DeclaredOption") -> bool:
        return (self.type, self.default, self.spec) == (other.type, other.default, other.spec)


OPTIONS: dict[str, DeclaredOption] = {}  # every method's options, in registration order


def register(name: str, *, aliases: tuple[str, ...] = ()):
    """Class decorator: make a PositionalEmbedding selectable as `pos-emb: <name>` (or an alias)."""
    def add(cls):
        for spelling in (name, *aliases):
            if spelling in REGISTRY or spelling in ALIASES:
                taken = REGISTRY.get(spelling) or REGISTRY[ALIASES[spelling]]
                raise PositionalEmbeddingError(
                    f"positional embedding '{spelling}' is registered twice ({taken.__qualname__} and "
                    f"{cls.__qualname__}); pick a new name for one of them")
        declared = declared_options(cls, name)
        for option in declared:
            known = OPTIONS.get(option.name)
            if known is not None and not known.same_declaration(option):
                raise PositionalEmbeddingError(
                    f"pos-emb '{name}' declares option {option.name} (default {option.default!r}), which "
                    f"pos-emb '{known.owner}' already declares differently (default {known.default!r}). One "
                    f"config key has one declaration: rename the option, or reuse the other method's Options "
                    f"(inherit its dataclass).")
        cls.name = name
        REGISTRY[name] = cls
        ALIASES.update({alias: name for alias in aliases})
        for option in declared:
            OPTIONS.setdefault(option.name, option)
        return cls
    return add


def declared_options(cls, name: str) -> list[DeclaredOption]:
    options = cls.Options
    if not dataclasses.is_dataclass(options):
        raise PositionalEmbeddingError(
            f"pos-emb '{name}': {cls.__qualname__}.Options must be a @dataclass whose fields are declared "
            "with option(default, help, ...).")
    hints = typing.get_type_hints(options)
    out = []
    for f in dataclasses.fields(options):
        spec = f.metadata.get("option")
        if spec is None:
            raise PositionalEmbeddingError(
                f"pos-emb '{name}': option {f.name} of {cls.__qualname__}.Options is a plain field; declare "
                f"it with option(default, help, ...) so the config and its reference know it.")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        out.append(DeclaredOption(f.name, hints[f.name], default, spec, name))
    return out
