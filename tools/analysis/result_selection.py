"""Which result files a table or figure reads: several folders, files or globs, filtered and renamed.

    python -m tools.analysis.make_tables eval_results/a 'eval_results/b*' --name 'KERPLE*' --seed 1 2 \
        --length 64 512 --rename kerple_log=KERPLE-log --rename 5bba9a12=hybrid

Every tool of this folder takes the same arguments (`add_selection_arguments`) and reads them with
`selected_documents`. A run is matched by its label (its run-name, or the method and what it was
trained with), its short label (`kerple_log+docpos`), its method (`kerple_log`) or the start of its
config hash (at least 6 characters): `--method` by method or short label, `--name` by label, `--rename
OLD=NEW` by label, short label or config hash. --method and --name take shell-style patterns (`kerple*`).
"""
import fnmatch
import glob
import pathlib

from megatron.evaluation.identity import Method
from megatron.evaluation.results import ResultFileError, load_result, load_results
from megatron.quoting import quote

HASH_PREFIX = 6  # a rename by config hash needs this many characters: fewer may name several runs by chance


def add_selection_arguments(parser, length_filter: bool = True) -> None:
    parser.add_argument("results", nargs="+", metavar="RESULTS",
                        help="folders of result files written by evaluate.py, result files, or globs of either "
                             "(quoted: 'eval_results/*')")
    parser.add_argument("--method", nargs="+", metavar="PATTERN",
                        help="keep runs whose method or short label matches (e.g. kerple_log 'rotary+yarn*')")
    parser.add_argument("--name", nargs="+", metavar="PATTERN",
                        help="keep runs whose label (run-name, else method and training switches) matches")
    parser.add_argument("--seed", nargs="+", type=int, metavar="SEED", help="keep runs of these seeds")
    if length_filter:
        parser.add_argument("--length", nargs="+", type=int, metavar="L", dest="keep_lengths",
                            help="keep these evaluation lengths")
    parser.add_argument("--rename", action="append", default=[], metavar="OLD=NEW",
                        help="show a run under another label; OLD: its label, short label or config-hash prefix "
                             "(repeatable)")


def selected_documents(args) -> list[dict]:
    """The result documents the arguments name, filtered and renamed (each run's `label` the one shown)."""
    documents = [d for d in read_paths(args.results) if passes_filters(d, args)]
    if getattr(args, "keep_lengths", None):
        documents = [dict(d, results=[r for r in d["results"] if r["length"] in args.keep_lengths])
                     for d in documents]
    documents = rename(documents, args.rename)
    if not documents:
        raise ResultFileError(f"no result file in {' '.join(map(quote, args.results))} passes the filters "
                              f"({_filters_text(args)}); loosen --method, --name or --seed")
    return documents


def read_paths(paths) -> list[dict]:
    """Every result file of the folders, files and globs given, each read once, in the order given."""
    documents, seen = [], set()
    for given in paths:
        matches = sorted(glob.glob(given)) if glob.has_magic(given) else [given]
        if not matches:
            raise ResultFileError(f"{quote(given)} matches no folder or file; give folders of result files "
                                  "written by evaluate.py (eval-results-dir)")
        for match in map(pathlib.Path, matches):
            if glob.has_magic(given) and match.is_file() and match.suffix != ".json":
                continue  # a glob over a results folder also matches its figures
            for document in load_results(match) if match.is_dir() else [load_result(match)]:
                if pathlib.Path(document["path"]).resolve() not in seen:
                    seen.add(pathlib.Path(document["path"]).resolve())
                    documents.append(document)
    return documents


def names_of(run: dict) -> set[str]:
    """What a run answers to: its label, readable label, short label and run-name."""
    method = Method.of_run(run)
    return {str(method), method.display, str(method.short), run.get("run_name") or ""} - {""}


def passes_filters(document, args) -> bool:
    run = document["run"]
    method = Method.of_run(run)
    if args.method and not _matches({run["pos_emb"], str(method.short)}, args.method):
        return False
    if args.name and not _matches({method.display, str(method)}, args.name):
        return False
    return not args.seed or run["seed"] in args.seed


def _matches(names, patterns) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for name in names for pattern in patterns)


def _filters_text(args) -> str:
    given = [f"--{flag} {' '.join(map(str, getattr(args, key)))}" for flag, key in (
        ("method", "method"), ("name", "name"), ("seed", "seed"), ("length", "keep_lengths")) if getattr(args, key, None)]
    return ", ".join(given) or "none"


def rename(documents, renames) -> list[dict]:
    """Documents with `run.label` (and run_name) replaced where a --rename OLD=NEW names the run."""
    pairs = []
    for item in renames:
        old, sep, new = item.partition("=")
        if not sep or not old or not new:
            raise ResultFileError(f"--rename {quote(item)}: write OLD=NEW, OLD a run's label, short label "
                                  f"or config-hash prefix (at least {HASH_PREFIX} characters), NEW the label to show")
        pairs.append((old, new))
    used, out = set(), []
    for document in documents:
        run = document["run"]
        for old, new in pairs:
            by_hash = len(old) >= HASH_PREFIX and str(run.get("config_hash") or "").startswith(old)
            if by_hash or old in names_of(run):
                used.add(old)
                document = dict(document, run=dict(run, run_name=new, label=new))
                break
        out.append(document)
    unused = [old for old, _ in pairs if old not in used]
    if unused:
        known = sorted({Method.of_run(d["run"]).display for d in documents})
        raise ResultFileError(f"--rename: no run is called {', '.join(map(quote, unused))} (the runs read are "
                              f"{quote(known)}); name a run by its label, short label or config-hash prefix")
    return out
