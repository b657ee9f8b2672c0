"""The command line every generated docs table shares: print the table, `--write` it between its markers in
its page, or `--check` that the page's copy is current."""
import argparse
import pathlib
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]


def table_cli(description: str, table, page: str, begin: str, end: str, script: str, what: str) -> int:
    """`table()` -> the Markdown; `page` (repo-relative) holds it between `begin` and `end`."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help=f"fail if {page}'s table is stale")
    parser.add_argument("--write", action="store_true", help=f"replace {page}'s table")
    args = parser.parse_args()
    text = table()
    if not (args.check or args.write):
        print(text, end="")
        return 0
    path = REPO_ROOT / page
    before, rest = path.read_text().split(begin, 1)
    current, after = rest.split(end, 1)
    if args.write:
        path.write_text(f"{before}{begin}\n{text}{end}{after}")
        return 0
    if current.strip() + "\n" != text:
        print(f"{path}: the {what} is out of date; regenerate it with `python {script} --write`.", file=sys.stderr)
        return 1
    return 0
