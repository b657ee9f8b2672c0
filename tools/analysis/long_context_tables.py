"""What make_tables prints after Table 3 when its folders hold RULER results (eval.py's lm_eval/): the RULER
table (ruler_table.py) and the effective-length table (effective_length.py, default threshold and factor),
with make_tables' own selection: --method / --name / --seed / --length / --rename as for Table 3, and
--ruler-task for the RULER tasks shown. --length filters the RULER table's rows only: the effective length
is computed from every length measured, so its reference and its walk do not move with the display."""
import argparse
import fnmatch
import glob
import pathlib

from megatron.evaluation.results import ResultFileError
from megatron.quoting import quote
from .effective_length import PPL_FACTOR, THRESHOLD, curves_of, estimates_of, render_table
from .result_selection import passes_filters, rename, selected_documents
from .ruler_table import load_ruler, ruler_tables


def add_ruler_arguments(parser) -> None:
    parser.add_argument("--ruler-task", nargs="+", metavar="PATTERN",
                        help="RULER tasks shown in the RULER and effective-length tables (e.g. niah_single_1 'niah_*')")


def result_folders(paths) -> list[pathlib.Path]:
    """The folders among make_tables' RESULTS arguments (globs expanded), each once, in the order given."""
    folders = []
    for given in paths:
        for match in (sorted(glob.glob(given)) if glob.has_magic(given) else [given]):
            folder = pathlib.Path(match)
            if folder.is_dir() and folder not in folders:
                folders.append(folder)
    return folders


def selected_ruler(args, filter_lengths: bool = True) -> list[dict]:
    """The RULER documents of make_tables' folders that pass its filters (runs, seeds, tasks, and lengths
    unless filter_lengths is False)."""
    documents = [d for folder in result_folders(args.results) for d in load_ruler(folder)
                 if passes_filters(d, args)]
    lengths, tasks = getattr(args, "keep_lengths", None) if filter_lengths else None, getattr(args, "ruler_task", None)
    out = []
    for document in documents:
        kept = {task: {n: r for n, r in per_length.items() if not lengths or int(n) in lengths}
                for task, per_length in document["ruler"].items()
                if not tasks or any(fnmatch.fnmatchcase(task, p) for p in tasks)}
        kept = {task: per_length for task, per_length in kept.items() if per_length}
        if kept:
            out.append(dict(document, ruler=kept))
    if documents and tasks and not out:
        known = sorted({t for d in documents for t in d["ruler"]})
        raise ResultFileError(f"--ruler-task {' '.join(map(quote, tasks))}: no RULER result of these tasks in the "
                              f"runs selected (their tasks: {', '.join(known)}).")
    return out


def long_context_tables(args, documents: list[dict]) -> str:
    """The two tables as markdown for make_tables' `args` and its selected, renamed evaluate.py `documents`,
    or "" when no folder of args.results has RULER results."""
    ruler = selected_ruler(args)
    if not ruler:
        return ""
    ruler = rename(ruler + documents, args.rename)[:len(ruler)]  # --rename names a run of either kind
    if getattr(args, "keep_lengths", None):  # the effective length reads every length measured
        # (RULER results alone: no perplexity result to read again)
        documents = selected_documents(argparse.Namespace(**{**vars(args), "keep_lengths": None})) if documents else []
        every = selected_ruler(args, filter_lengths=False)
        by_measure = estimates_of(curves_of(documents, rename(every + documents, args.rename)[:len(every)]),
                                  THRESHOLD, PPL_FACTOR)
    else:
        by_measure = estimates_of(curves_of(documents, ruler), THRESHOLD, PPL_FACTOR)
    if getattr(args, "ruler_task", None):  # perplexity and the probes stay; RULER tasks as selected
        shown = {t for d in ruler for t in d["ruler"]}
        by_measure = {m: v for m, v in by_measure.items() if m in shown or not _is_ruler(m, documents)}
    return ("\n" + ruler_tables(ruler, args.reference, args.alpha) + "\n"
            + render_table(by_measure, THRESHOLD, PPL_FACTOR) + "\n")


def _is_ruler(measure: str, documents) -> bool:
    """Whether a measure is a RULER task's (the others come from evaluate.py's modes)."""
    modes = {r["mode"] for d in documents for r in d["results"]}
    return not (measure.startswith("ppl (") or measure in modes)
