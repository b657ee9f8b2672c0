"""Read NeoX YAML config files: normalised top-level keys, line numbers, `extends`, merge rule.

Merge rule: files merge in the order given (an `extends:` list is read before the file that names
it); a later file overrides an earlier one and the printed config names the file that won. Within
one file a key may appear once: `train-iters` and `train_iters` together are an error.
"""
import pathlib
import re

import yaml

from .errors import NeoXArgsError


class _Loader(yaml.SafeLoader):
    """SafeLoader that also reads `1e-5` (no dot) as a float, as users expect; PyYAML reads a string."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"""^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$|^[-+]?\.[0-9_]+(?:[eE][-+]?[0-9]+)?$""",
               re.X),
    list("-+0123456789."),
)


def normalise_key(key: str) -> str:
    return str(key).strip().replace("-", "_")


def parse_value(text: str):
    """A command-line value (`--set key=value`) read the way YAML would read it."""
    return yaml.load(text, Loader=_Loader)


def _read_one(path: pathlib.Path):
    """Returns ({key: (spelling, value)}, {key: line}, text) for one file, keys normalised."""
    if path.is_dir():
        raise NeoXArgsError(f"Config file {path} is a directory, not a YAML file. Name the files in it "
                            f"(e.g. {path}/*.yml), or with deepy.py use `-d {path} NAME`.")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NeoXArgsError(f"Config file {path} does not exist. Check the path (deepy.py's -d DIR "
                            "is prefixed to every config name, and `.yml` is added when missing).")
    except UnicodeDecodeError as err:
        line = err.object[:err.start].count(b"\n") + 1
        raise NeoXArgsError(f"Config file {path} is not UTF-8 text: byte {err.object[err.start]:#04x} on line "
                            f"{line} (byte offset {err.start}) cannot be decoded. Save the file as UTF-8 "
                            "(e.g. `iconv -f latin1 -t utf-8`).") from None
    except OSError as err:
        raise NeoXArgsError(f"Config file {path} cannot be read: {err.strerror}.") from None
    try:
        node = yaml.compose(text, Loader=_Loader)
        values = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as err:
        raise NeoXArgsError(f"Config file {path} is not valid YAML: {err}. Fix the syntax at that line.")
    if values is None:
        return {}, {}, text
    if not isinstance(values, dict) or not isinstance(node, yaml.MappingNode):
        raise NeoXArgsError(f"Config file {path} must hold a mapping of keys to values at the top level, "
                            f"not a {type(values).__name__}.")
    lines, out = {}, {}
    for key_node, _ in node.value:
        raw, key = key_node.value, normalise_key(key_node.value)
        line = key_node.start_mark.line + 1
        if key in lines:
            raise NeoXArgsError(
                f"{path} line {line}: key '{raw}' repeats '{key}' already set on line {lines[key]} "
                "('-' and '_' are the same in config keys). Keep one of them.")
        lines[key] = line
    for raw, value in values.items():
        out[normalise_key(raw)] = (str(raw), value)
    return out, lines, text


def load_config_files(paths):
    """Merge YAML files. Returns (values, sources, texts): values keep the user's spelling of each
    key (for error messages), sources[normalised key] = 'file:line'."""
    spelled, sources, texts = _merge(paths, ())
    return dict(spelled.values()), sources, texts


def _merge(paths, _seen):
    values, sources, texts = {}, {}, {}
    for path in map(pathlib.Path, paths):
        resolved = path.resolve()
        if resolved in _seen:
            raise NeoXArgsError(f"Config file {path} extends itself (through `extends`). Remove the cycle.")
        file_values, lines, text = _read_one(path)
        bases = file_values.pop("extends", (None, []))[1]
        if isinstance(bases, str):
            bases = [bases]
        if not isinstance(bases, list):
            raise NeoXArgsError(f"{path} line {lines['extends']}: `extends` must be a file name or a list of them.")
        if bases:
            inc_values, inc_sources, inc_texts = _merge(
                [path.parent / base for base in bases], _seen + (resolved,))
            values.update(inc_values)
            sources.update(inc_sources)
            texts.update(inc_texts)
        texts[path.name] = text
        for key, value in file_values.items():
            values[key] = value
            sources[key] = f"{path}:{lines[key]}"
    return values, sources, texts
