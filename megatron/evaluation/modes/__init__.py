"""Evaluation modes, registered by name: each mode is one file in this folder.

A mode is a function `score(context) -> dict` decorated with `@register(name, help)`; it asks the
context (megatron/evaluation/context.py) for a loss matrix [chunks, L] and returns the fields of its
record in the result file (usually `context.summary(losses)` plus anything of its own). A mode that
cannot score some lengths also gives `check=`, a function `check(settings, tokenizer, stream,
lengths)` (settings: megatron/evaluation/settings.py) that raises a NeoXArgsError naming them; evaluate.py calls it for every mode before
anything is scored, so a bad length is found before the good ones' time is spent. A mode with config
keys of its own gives `options=`, a dataclass whose fields are declared with `option(default, help,
check=...)` as a positional method's are (megatron/model/positional_embeddings/base.py); modes may
share a key only by sharing its declaration (kv-retrieval's Options extend the grid options passkey
uses). The config's `eval-modes` accepts exactly the registered names, its evaluation keys include
every mode's options (megatron/neox_arguments/groups.py), evaluate.py runs the modes, and the table
and figure tools offer them as `--mode`.

Files are found, not listed: every module in this package's folders is imported on first lookup. The
folders are this one plus those in the environment variable NEOX_EVAL_MODES_PATH (os.pathsep-separated),
so a mode can also live outside the repository; a file there behaves exactly as one placed here.
"""
import dataclasses
import importlib
import os
import pkgutil
from typing import Callable

from megatron.errors import NeoXArgsError

PATH_VARIABLE = "NEOX_EVAL_MODES_PATH"
__path__ += [folder for folder in os.environ.get(PATH_VARIABLE, "").split(os.pathsep) if folder]


class EvalModeError(NeoXArgsError):
    """A mode that cannot be registered or found."""


@dataclasses.dataclass(frozen=True)
class EvalMode:
    name: str
    help: str
    score: Callable  # (context) -> the record's fields
    check: Callable | None = None  # (settings, tokenizer, stream, lengths): raises for a length it cannot score
    options: type | None = None    # the dataclass of its config keys
    # Scores only through loss passes (ModeContext.losses), so a sequence split over a sequence-parallel group
    # scores it; False: it runs the whole model on prompts of its own (context.network: the probes).
    splits_sequences: bool = True


_REGISTRY: dict[str, EvalMode] = {}
_discovered = False
_broken: list[NeoXArgsError] = []  # the errors of mode files that could not be loaded


def register(name: str, help: str, check: Callable | None = None, options: type | None = None,
             splits_sequences: bool = True):
    """Decorator: `@register("sliding", "what it measures")` above `def score(context) -> dict`."""
    def add(score):
        if name in _REGISTRY:
            raise EvalModeError(
                f"evaluation mode {name!r} is registered twice ({_REGISTRY[name].score.__module__} and "
                f"{score.__module__}); rename one of them")
        _REGISTRY[name] = EvalMode(name, help, score, check, options, splits_sequences)
        return score
    return add


def _discover() -> None:
    """Import every mode file once. A file that fails is kept as its error, raised by every lookup
    (mode_names, get_mode) rather than here: the config reads the modes' options when it is imported,
    before an entry point can print a config error as one paragraph."""
    global _discovered
    if _discovered:
        return
    _discovered = True
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        try:
            importlib.import_module(f"{__name__}.{module.name}")
        except NeoXArgsError as err:
            _broken.append(err)
        except Exception as err:  # a broken mode file: say which, not a traceback from deep inside
            problem = EvalModeError(f"evaluation mode file {module.name}.py (in {module.module_finder.path}) "
                                    f"could not be loaded: {type(err).__name__}: {err}. Fix or remove that file.")
            problem.__cause__ = err
            _broken.append(problem)


def _registered() -> dict[str, EvalMode]:
    _discover()
    if _broken:
        raise _broken[0]
    return _REGISTRY


def mode_options() -> list[tuple[str, type | None]]:
    """(name, options dataclass) of every mode that loaded, in mode_names' order (a broken file's error
    comes with the first lookup)."""
    _discover()
    return [(name, _REGISTRY[name].options) for name in _ordered()]


def _ordered() -> tuple[str, ...]:
    builtin = ("nonoverlap", "sliding", "position")
    return tuple(n for n in builtin if n in _REGISTRY) + tuple(sorted(set(_REGISTRY) - set(builtin)))


def mode_names() -> tuple[str, ...]:
    """The registered names: the built-in ones first, in the paper's order, then the rest by name."""
    _registered()
    return _ordered()


def get_mode(name: str) -> EvalMode:
    if name not in _registered():
        raise EvalModeError(f"unknown evaluation mode {name!r}; the registered modes are "
                            f"{', '.join(mode_names())} (each a file in megatron/evaluation/modes/)")
    return _REGISTRY[name]
