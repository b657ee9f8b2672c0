"""Evaluation modes, registered by name: each mode is one file in this folder.

A mode is a function `score(context) -> dict` decorated with `@register(name, help)`; it asks the
context (megatron/evaluation/context.py) for a loss matrix [chunks, L] and returns the fields of its
record in the result file (usually `context.summary(losses)` plus anything of its own). A mode that
cannot score some lengths also gives `check=`, a function `check(neox_args, tokenizer, stream,
lengths)` that raises a NeoXArgsError naming them; evaluate.py calls it for every mode before
anything is scored, so a bad length is found before the good ones' time is spent. The config's
`eval-modes` accepts exactly the registered names, evaluate.py runs them, and the table and figure
tools offer them as `--mode`.

Files are found, not listed: every module in this package's folders is imported on first lookup. The
folders are this one plus those in the environment variable NEOX_EVAL_MODES_PATH (os.pathsep-separated),
so a mode can also live outside the repository; a file there behaves exactly as one placed here.
"""
import dataclasses
import importlib
import os
import pkgutil
from typing import Callable

from megatron.neox_arguments.errors import NeoXArgsError

PATH_VARIABLE = "NEOX_EVAL_MODES_PATH"
__path__ += [folder for folder in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if folder]


class EvalModeError(NeoXArgsError):
    """A mode that cannot be registered or found."""


@dataclasses.dataclass(frozen=True)
class EvalMode:
    name: str
    help: str
    score: Callable  # (context) -> the record's fields
    check: Callable | None = None  # (neox_args, tokenizer, stream, lengths): raises for a length it cannot score


_REGISTRY: dict[str, EvalMode] = {}
_discovered = False


def register(name: str, help: str, check: Callable | None = None):
    """Decorator: `@register("sliding", "what it measures")` above `def score(context) -> dict`."""
    def add(score):
        if name in _REGISTRY:
            raise EvalModeError(
                f"evaluation mode {name!r} is registered twice ({_REGISTRY[name].score.__module__} and "
                f"{score.__module__}); rename one of them")
        _REGISTRY[name] = EvalMode(name, help, score, check)
        return score
    return add


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        try:
            importlib.import_module(f"{__name__}.{module.name}")
        except NeoXArgsError:
            raise
        except Exception as err:  # a broken mode file: say which, not a traceback from deep inside
            raise EvalModeError(f"evaluation mode file {module.name}.py (in {module.module_finder.path}) "
                                f"could not be loaded: {type(err).__name__}: {err}. Fix or remove that file.") from err


def mode_names() -> tuple[str, ...]:
    """The registered names: the built-in ones first, in the paper's order, then the rest by name."""
    _discover()
    builtin = ("nonoverlap", "sliding", "position")
    return tuple(n for n in builtin if n in _REGISTRY) + tuple(sorted(set(_REGISTRY) - set(builtin)))


def get_mode(name: str) -> EvalMode:
    _discover()
    if name not in _REGISTRY:
        raise EvalModeError(f"unknown evaluation mode {name!r}; the registered modes are "
                            f"{', '.join(mode_names())} (each a file in megatron/evaluation/modes/)")
    return _REGISTRY[name]
