"""Config keys whose owner declares them: an evaluation mode (megatron/evaluation/modes) or a probe's
training mix (megatron/probes) gives a dataclass whose fields are declared with
`option(default, help, check=...)`, the declaration positional methods use
(megatron/model/positional_embeddings/base.py; their registry reads theirs). Here those dataclasses
become config keys (groups.py) and are checked (`check_owned`)."""
import dataclasses
import typing

from megatron.model.positional_embeddings import OptionError

from .errors import NeoXArgsError


@dataclasses.dataclass(frozen=True)
class OwnedOption:
    name: str
    type: object
    default: object
    help: str
    check: typing.Callable | None
    owner: str  # the first owner that declared it, for error messages

    def same_declaration(self, other: "OwnedOption") -> bool:
        return (self.type, self.default, self.help, self.check) == (other.type, other.default, other.help,
                                                                    other.check)


def owned_options(owners) -> list[OwnedOption]:
    """Every option of [(owner name, Options dataclass or None)], in order, each key once: owners share a
    key only by sharing its declaration (one dataclass extending another)."""
    seen: dict[str, OwnedOption] = {}
    for owner, options in owners:
        if options is None:
            continue
        hints = typing.get_type_hints(options)
        for f in dataclasses.fields(options):
            spec = f.metadata.get("option")
            if spec is None:
                raise NeoXArgsError(f"{owner}: option {f.name} of {options.__qualname__} is a plain field; declare it "
                                    "with option(default, help, ...) so the config and its reference know it.")
            default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
            declared = OwnedOption(f.name, hints[f.name], default, spec.help, spec.check, owner)
            known = seen.setdefault(f.name, declared)
            if not known.same_declaration(declared):
                raise NeoXArgsError(f"{owner} declares option {f.name} (default {default!r}), which {known.owner} "
                                    f"already declares differently (default {known.default!r}). One config key has "
                                    "one declaration: rename the option, or extend the other's Options dataclass.")
    return list(seen.values())


def check_owned(args, options: type, fail) -> None:
    """Each of `options`' keys by its declared check, then the dataclass built from the config's values,
    whose __post_init__ checks them together; `fail(key, message)` raises the error naming the file."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(options)}
    for f in dataclasses.fields(options):
        check, value = f.metadata["option"].check, values[f.name]
        if check and value is not None and (problem := check(value)):
            fail(f.name, problem)
    try:
        options(**values)
    except OptionError as err:
        fail(err.key, err.message)
