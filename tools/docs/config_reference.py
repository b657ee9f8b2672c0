#!/usr/bin/env python
"""Print the config reference (Markdown) from the typed config groups, for README.md.

`python tools/docs/config_reference.py` prints it; `--check README.md` fails when README's copy
(between the CONFIG-REFERENCE markers) is out of date.
"""
import argparse
import dataclasses
import json
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
from megatron.neox_arguments.groups import GROUPS  # noqa: E402

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
    parser.add_argument("--check", metavar="README", help="fail if this file's reference is stale")
    args = parser.parse_args()
    text = reference()
    if not args.check:
        print(text, end="")
        return 0
    readme = pathlib.Path(args.check).read_text()
    current = readme.split(BEGIN, 1)[1].split(END, 1)[0].strip() + "\n" if BEGIN in readme else ""
    if current != text:
        print(f"{args.check}: the config reference is out of date; regenerate it with "
              "`python tools/docs/config_reference.py` and paste it between the markers.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
