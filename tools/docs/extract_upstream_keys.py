#!/usr/bin/env python
"""Write megatron/neox_arguments/upstream_keys.json: every config key upstream GPT-NeoX and the KERPLE
fork define, with its argument class, type and default, read from their argument dataclasses.

Run once per upstream release, on fetched checkouts (git directories; nothing is downloaded here):
    python tools/docs/extract_upstream_keys.py --neox /path/to/gpt-neox.git --kerple /path/to/KERPLE.git
Only names, types and defaults are read (no help text is copied). What this project does with each
key is written by hand, once, in megatron/neox_arguments/upstream_treatments.py.
"""
import argparse
import ast
import pathlib
import json
import subprocess

FILES = ("megatron/neox_arguments/neox_args.py", "megatron/neox_arguments/deepspeed_args.py")
OUT = pathlib.Path(__file__).resolve().parents[2] / "megatron" / "neox_arguments" / "upstream_keys.json"


def git(git_dir, *args) -> str:
    return subprocess.run(["git", "--git-dir", str(git_dir), *args], check=True, capture_output=True,
                          text=True).stdout


def fields(source: str):
    """(class, key, type, default) of every annotated field of every NeoXArgs* class."""
    for node in ast.parse(source).body:
        if isinstance(node, ast.ClassDef) and node.name.startswith("NeoXArgs"):
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    default = ast.unparse(item.value) if item.value is not None else "(required)"
                    yield node.name, item.target.id, ast.unparse(item.annotation), default


def read(git_dir):
    commit = git(git_dir, "rev-parse", "HEAD").strip()
    keys = {}
    for path in FILES:
        for cls, key, typ, default in fields(git(git_dir, "show", f"HEAD:{path}")):
            keys[key] = {"group": cls.removeprefix("NeoXArgs"), "type": typ, "default": default}
    return commit, keys


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--neox", required=True, help="git directory of EleutherAI/gpt-neox")
    parser.add_argument("--kerple", required=True, help="git directory of chijames/KERPLE")
    ns = parser.parse_args()
    neox_commit, neox = read(ns.neox)
    kerple_commit, kerple = read(ns.kerple)
    table = {}
    for key in sorted(set(neox) | set(kerple)):
        entry = dict(neox.get(key) or kerple[key])
        entry["in"] = "both" if key in neox and key in kerple else "neox" if key in neox else "kerple"
        if key in kerple and key in neox and kerple[key]["default"] != neox[key]["default"]:
            entry["kerple_default"] = kerple[key]["default"]
        table[key] = entry
    # One key a line, so a rerun's diff shows what upstream changed.
    rows = ",\n".join(f"    {json.dumps(k)}: {json.dumps(v)}" for k, v in table.items())
    OUT.write_text("{\n"
                   f'  "_generated_by": "tools/docs/extract_upstream_keys.py (do not edit; rerun it)",\n'
                   f'  "neox_commit": "{neox_commit}",\n  "kerple_commit": "{kerple_commit}",\n'
                   f'  "keys": {{\n{rows}\n  }}\n}}\n')
    print(f"{OUT}: {len(table)} keys ({len(neox)} upstream GPT-NeoX, {len(kerple)} KERPLE fork)")


if __name__ == "__main__":
    main()
