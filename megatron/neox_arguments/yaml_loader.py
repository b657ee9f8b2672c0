"""Read NeoX YAML config files: normalised top-level keys, line numbers, `extends`, merge rule.

Merge rule: files merge in the order given (an `extends:` list is read before the file that names
it); a later file overrides an earlier one and the printed config names the file that won. Within
one file a key may appear once, at every depth: `train-iters` and `train_iters` together are an
error, and so is `lr` twice inside `optimizer: {params: ...}`. A YAML merge key (`<<: *anchor`)
is read as YAML defines it: the keys written beside it override the merged ones, and a merged key
counts as set on the anchor's line. Aliases may repeat at most MAX_ALIAS_VALUES values in all, so a
"billion laughs" file is refused at once instead of being expanded.

Besides the top-level keys' lines, `sources` holds the line of every nested value, under its key
path (`optimizer.params.lr`, `eval_lengths[2]`), for the messages that name one (`where_of`).
"""
import pathlib
import re

import yaml

from .errors import NeoXArgsError
from megatron.quoting import quote

MAX_ALIAS_VALUES = 100_000  # values that aliases may add to a file beyond what it writes out

_MAP, _SEQ, _MERGE = "tag:yaml.org,2002:map", "tag:yaml.org,2002:seq", "tag:yaml.org,2002:merge"


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


def key_path(path: str) -> str:
    """A key path as a user writes it: the top-level key with '-' (`optimizer.params.lr`)."""
    top = re.match(r"[^.\[]*", path).group(0)
    return top.replace("_", "-") + path[len(top):]


def where_of(sources: dict, path: str, default: str = "the config") -> str:
    """'file:line' of a key path: its own line if it has one, else the nearest enclosing key's."""
    while path:
        if path in sources:
            return sources[path]
        path = path[:max(path.rfind("."), path.rfind("["), 0)]
    return default


def parse_value(text: str, where: str = "--set"):
    """A command-line value (`--set key=value`) read the way YAML would read it, with the same limits."""
    document = _Document(text, where, numbered=False)
    node = document.compose()
    if node is None:
        return None
    document.count(node)
    return document._value(node, "")


class _Document:
    """One YAML text turned into Python values by walking its nodes: every mapping checked for repeated
    keys, merge keys applied, aliases counted, and the line of every value kept by key path."""

    def __init__(self, text: str, name: str, numbered: bool = True):
        self.name, self.numbered, self.lines = name, numbered, {}
        self.loader = _Loader(text)

    def where(self, node) -> str:
        return f"{self.name} line {node.start_mark.line + 1}" if self.numbered else self.name

    def fail(self, node, message: str):
        raise NeoXArgsError(f"{self.where(node)}: {message}")

    def named(self) -> str:
        return f"Config file {self.name}" if self.numbered else self.name

    def compose(self):
        """The document's node graph (aliases still shared), or None when it is empty."""
        try:
            return self.loader.get_single_node()
        except yaml.YAMLError as err:
            raise NeoXArgsError(f"{self.named()} is not valid YAML: {_problem(err)}. Fix the syntax there.") from None
        except RecursionError:
            raise NeoXArgsError(f"{self.named()} nests lists or mappings too deeply for a config (past Python's "
                                "recursion limit); a config needs a few levels.") from None
        finally:
            self.loader.dispose()

    def count(self, root):
        """Refuse aliases that expand to more than MAX_ALIAS_VALUES values beyond the written ones,
        counting each shared node once (nothing is expanded), and an alias inside its own anchor."""
        sizes, open_ = {}, set()

        def size(node):
            if id(node) in sizes:
                return sizes[id(node)]
            if id(node) in open_:
                self.fail(node, "an alias (*name) refers to the mapping or list that contains it, which "
                                "would be infinitely deep. Write the value out.")
            open_.add(id(node))
            children = ([c for pair in node.value for c in pair] if isinstance(node, yaml.MappingNode)
                        else node.value if isinstance(node, yaml.SequenceNode) else [])
            sizes[id(node)] = 1 + sum(size(child) for child in children)
            open_.discard(id(node))
            return sizes[id(node)]

        try:
            expanded = size(root)
        except RecursionError:
            raise NeoXArgsError(f"{self.named()} nests lists or mappings too deeply for a config.") from None
        if expanded - len(sizes) > MAX_ALIAS_VALUES:
            raise NeoXArgsError(
                f"{self.named()}: its aliases (*name) expand to {expanded:,} values from the {len(sizes):,} "
                f"written, more than the {MAX_ALIAS_VALUES:,} that aliases may add to a config (a \"billion "
                "laughs\" file?). Write the values out, or use fewer nested aliases.")

    def _scalar(self, node):
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as err:
            raise NeoXArgsError(f"{self.named()} is not valid YAML: {_problem(err)}. Fix the value there.") from None
        except ValueError as err:  # e.g. an integer of more than 4300 digits
            self.fail(node, f"the value {quote(node.value)} cannot be read: {err}.")

    def _value(self, node, path):
        self.lines[path] = node.start_mark.line + 1
        if isinstance(node, yaml.MappingNode) and node.tag == _MAP:
            return self._mapping(node, path)[0]
        if isinstance(node, yaml.SequenceNode) and node.tag == _SEQ:
            return [self._value(item, f"{path}[{i}]") for i, item in enumerate(node.value)]
        return self._scalar(node)  # scalars, and collections with an explicit tag (!!set, !!omap)

    def _mapping(self, node, path):
        """({key: value}, {key: its key node}) of one mapping, the top level's keys normalised."""
        values, key_nodes, merged = {}, {}, {}
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE:
                self._merge(key_node, value_node, path, key_nodes, merged)
                continue
            key = self._scalar(key_node) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, (str, int, float, bool)):
                self.fail(key_node, f"{_name(path, '?')}: a key must be a name (a plain value), not a list "
                                    "or mapping.")
            norm = key if path else normalise_key(key)
            if norm in key_nodes:
                first = key_nodes[norm].start_mark.line + 1
                if not path:
                    self.fail(key_node, f"key {quote(key_node.value)} repeats {quote(norm)} already set on line "
                                        f"{first} ('-' and '_' are the same in config keys). Keep one of them.")
                self.fail(key_node, f"key {_name(path, key)} is given twice in the same mapping (first on line "
                                    f"{first}); YAML would silently keep the last one. Keep one of them.")
            key_nodes[norm] = key_node
            values[norm] = self._value(value_node, _child(path, norm))
            self.lines[_child(path, norm)] = key_node.start_mark.line + 1
        for norm, (value, key_node, lines) in merged.items():
            if norm not in values:  # the keys written beside `<<` override the merged ones
                values[norm], key_nodes[norm] = value, key_node
                self.lines.update(lines)
        key_nodes.pop("<<", None)
        return values, key_nodes

    def _merge(self, key_node, value_node, path, key_nodes, merged):
        """`<<: *a` or `<<: [*a, *b]`: the mappings' keys (with their own lines) into `merged`, the
        first mapping listed winning, as YAML defines it."""
        if "<<" in key_nodes:
            self.fail(key_node, f"{_name(path, '<<')} is given twice in the same mapping (first on line "
                                f"{key_nodes['<<'].start_mark.line + 1}). Merge several anchors with one key: "
                                "`<<: [*a, *b]`.")
        key_nodes["<<"] = key_node
        for source in (value_node.value if isinstance(value_node, yaml.SequenceNode) else [value_node]):
            if not (isinstance(source, yaml.MappingNode) and source.tag == _MAP):
                self.fail(source, f"{_name(path, '<<')}: a merge key takes a mapping or a list of mappings "
                                  "(`<<: *anchor`), not a list or a single value.")
            saved, self.lines = self.lines, {}
            sub_values, sub_keys = self._mapping(source, path)
            sub_lines, self.lines = self.lines, saved
            for key, value in sub_values.items():
                child = _child(path, key)
                mine = {p: n for p, n in sub_lines.items()
                        if p == child or p.startswith(child + ".") or p.startswith(child + "[")}
                merged.setdefault(key, (value, sub_keys[key], mine))


def _problem(err: yaml.YAMLError) -> str:
    """PyYAML's error in one line: where, what, and while doing what."""
    if isinstance(err, yaml.MarkedYAMLError) and err.problem:
        mark = err.problem_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        return where + err.problem + (f" ({err.context})" if err.context else "")
    return " ".join(str(err).split())


def _child(path: str, key) -> str:
    return f"{path}.{key}" if path else str(key)


def _name(path: str, key) -> str:
    return quote(key_path(_child(path, key)))


def _read_one(path: pathlib.Path):
    """Returns ({key: (spelling, value)}, {key: line}, text, {nested key path: line}) for one file,
    top-level keys normalised."""
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
    document = _Document(text, str(path))
    node = document.compose()
    if node is None:
        return {}, {}, text, {}
    if not (isinstance(node, yaml.MappingNode) and node.tag == _MAP):
        kind = "list" if isinstance(node, yaml.SequenceNode) else "single value"
        raise NeoXArgsError(f"Config file {path} must hold a mapping of keys to values at the top level, "
                            f"not a {kind}.")
    document.count(node)
    values, key_nodes = document._mapping(node, "")
    lines = {key: key_nodes[key].start_mark.line + 1 for key in values}
    out = {key: (str(key_nodes[key].value), value) for key, value in values.items()}
    nested = {p: n for p, n in document.lines.items() if p and p not in values}
    return out, lines, text, nested


def load_config_files(paths):
    """Merge YAML files. Returns (values, sources, texts): values keep the user's spelling of each
    key (for error messages), sources[normalised key] = 'file:line', and sources['key.path'] the same
    for the nested values of the file that set the key (see where_of)."""
    spelled, sources, texts = _merge(paths, ())
    return dict(spelled.values()), sources, texts


def drop_nested(sources: dict, key: str) -> None:
    """Forget the nested lines under a key (path) that another file or --set replaced."""
    for path in [p for p in sources if p.startswith((key + ".", key + "["))]:
        del sources[path]


def _merge(paths, _seen):
    values, sources, texts = {}, {}, {}
    for path in map(pathlib.Path, paths):
        resolved = path.resolve()
        if resolved in _seen:
            raise NeoXArgsError(f"Config file {path} extends itself (through `extends`). Remove the cycle.")
        file_values, lines, text, nested = _read_one(path)
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
            drop_nested(sources, key)
        sources.update({p: f"{path}:{line}" for p, line in nested.items() if not p.startswith("extends")})
    return values, sources, texts
