#!/usr/bin/env python
"""Print the config reference (Markdown) from the typed config groups, for docs/config-reference.md.

`python tools/docs/config_reference.py` prints it; `--write` replaces the copy in docs/config-reference.md
(between the CONFIG-REFERENCE markers; `--write FILE` another file's); `--check` fails when that copy is
out of date. Keys an owner
declares are listed where the groups put them: the positional methods' options in the positional group
(megatron/model/positional_embeddings), the evaluation modes' in the evaluation group
(megatron/evaluation/modes), the probe training mix's in the data group (megatron/probes).
"""
import argparse
import dataclasses
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from megatron.neox_arguments.groups import GROUPS  # noqa: E402

PAGE = "docs/config-reference.md"
BEGIN, END = "<!-- CONFIG-REFERENCE:BEGIN -->", "<!-- CONFIG-REFERENCE:END -->"


def default_text(f):
    value = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
    return "—" if value is None else f"`{json.dumps(value)}`"


def reference() -> str:
    parts = []
    for group in GROUPS:
        title = group.__name__.removesuffix("Args")
        parts.append(f"#### {title}\n\n| key | default | meaning |\n|---|---|---|")
        for f in dataclasses.fields(group):
            parts.append(f"| `{f.name.replace('_', '-')}` | {default_text(f)} | {f.metadata['help']} |")
        parts.append("")
    return "\n".join(parts).strip() + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", metavar="FILE", nargs="?", const=PAGE,
                        help=f"fail if this file's reference is stale (default {PAGE})")
    parser.add_argument("--write", metavar="FILE", nargs="?", const=PAGE,
                        help=f"replace this file's reference (default {PAGE})")
    args = parser.parse_args()
    text = reference()
    if not (args.check or args.write):
        print(text, end="")
        return 0
    path = pathlib.Path(args.check or args.write)
    if not path.is_absolute() and not path.exists():  # run from another folder: the page in this checkout
        path = pathlib.Path(__file__).resolve().parents[2] / path
    readme = path.read_text()
    if BEGIN not in readme or END not in readme:
        print(f"{path}: no {BEGIN} ... {END} markers to hold the config reference; add them where it "
              "belongs.", file=sys.stderr)
        return 1
    before, rest = readme.split(BEGIN, 1)
    current, after = rest.split(END, 1)
    if args.write:
        path.write_text(f"{before}{BEGIN}\n{text}{END}{after}")
        return 0
    if current.strip() + "\n" != text:
        print(f"{path}: the config reference is out of date; regenerate it with "
              f"`python tools/docs/config_reference.py --write {path}`.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
