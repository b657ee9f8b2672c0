"""Result files -> the paper's Table 3 (perplexity per length and method) and Table 4 (sec/step).

    python -m tools.analysis.make_tables eval_results/ [more folders, files or globs] [--mode nonoverlap]
        [--reference kerple_log] [--method/--name/--seed/--length ...] [--rename OLD=NEW ...]
        [--test-across-budgets] [--paper [stdlib=GitHub ...]] [--train-logs RUN_DIR ...] [--out docs/tables]
        [--format md|tex|csv]

Rows are evaluation lengths, columns the runs of each dataset by label (run-name, else method and what it
was trained with: result_selection.py); the first row says how long each was trained (steps, tokens). A
cell is perplexity mean ± std over seeds, with † where the reference is significantly better and ‡ where
it is significantly worse (significance.py: across seeds when runs have several, and the table's note says
which test). Runs trained for different budgets are not tested against each other unless
--test-across-budgets, and then their marks are starred. `--paper` adds the paper's own cell beside each
method at the same extrapolation ratio, labelled as the paper's.
"""
import argparse
import csv
import io
import pathlib
import sys
from dataclasses import dataclass, field

import numpy as np

from megatron.neox_arguments import run_cli
from megatron.evaluation.modes import mode_names
from megatron.evaluation.results import ResultFileError
from megatron.run.preflight import folder_problem
from .paper_numbers import DEFAULT_DATASET_MAP, PAPER_TRAIN_LENGTH, TABLE3, paper_cell
from .long_context_tables import add_ruler_arguments, long_context_tables
from .result_selection import add_selection_arguments, selected_documents
from .results_index import budgets, index_results, method_sort_key, train_lengths
from .significance import REFERENCE_BETTER, REFERENCE_WORSE, Comparison, compare, tests_note
from .table_text import md_cell, md_row, tex_text
from .training_speed import render_table4, speed_table

ACROSS_BUDGETS = "*"  # the mark of a test between runs trained for different budgets


@dataclass
class Cell:
    ppl_mean: float | None = None
    ppl_std: float | None = None      # over seeds; None with one seed
    loss_mean: float | None = None
    seeds: int = 0
    comparison: Comparison | None = None
    skipped: str | None = None        # why the method cannot score this length (learned)
    paper: str | None = None          # the paper's "mean ± std" at the same ratio
    across_budgets: bool = False      # trained for another budget than the reference (tested only if asked)


@dataclass
class Table3:
    mode: str
    reference: str
    alpha: float
    datasets: list
    methods: dict                     # dataset -> ordered methods
    lengths: list
    train_length: dict                # dataset -> train length (None when runs differ)
    paper_map: dict                   # our dataset -> paper dataset
    cells: dict = field(default_factory=dict)  # (dataset, method, length) -> Cell
    budgets: dict = field(default_factory=dict)  # (dataset, method) -> [(steps, tokens)]
    test_across_budgets: bool = False


def build_table3(documents, mode="nonoverlap", reference="kerple_log", alpha=0.05, paper_map=None,
                 test_across_budgets=False):
    index = index_results(documents, mode)
    if not index:
        raise ResultFileError(f"no {mode} records in the result files; evaluate with eval-modes "
                              f"including {mode} or pick another --mode")
    datasets = sorted(index)
    # --reference may name a run by its shown label or its short one
    reference = next((m for d in datasets for m in index[d] if reference in (str(m), m.display)), reference)
    table = Table3(
        mode, reference, alpha, datasets,
        methods={d: sorted(index[d], key=method_sort_key) for d in datasets},
        lengths=sorted({length for d in datasets for m in index[d] for length in index[d][m]}),
        train_length=train_lengths(documents), paper_map=paper_map or {}, budgets=budgets(documents),
        test_across_budgets=test_across_budgets)
    for dataset in datasets:
        for method in table.methods[dataset]:
            for length, runs in index[dataset][method].items():
                table.cells[dataset, method, length] = _cell(table, index[dataset], dataset, method, length)
    return table


def _cell(table, runs_by_method, dataset, method, length):
    runs = runs_by_method[method][length]
    scored = {seed: r for seed, r in runs.items() if "skipped" not in r}
    cell = Cell(seeds=len(scored), paper=_paper(table, dataset, method, length))
    if not scored:
        cell.skipped = next(iter(runs.values()))["skipped"]
        return cell
    ppl = np.array([r["ppl"] for r in scored.values()])
    cell.ppl_mean, cell.loss_mean = float(ppl.mean()), float(np.mean([r["loss"] for r in scored.values()]))
    cell.ppl_std = float(ppl.std(ddof=1)) if len(ppl) > 1 else None
    reference_runs = runs_by_method.get(table.reference, {}).get(length, {})
    reference_runs = {s: r for s, r in reference_runs.items() if "skipped" not in r}
    if method != table.reference and reference_runs:
        cell.across_budgets = table.budgets.get((dataset, method)) != table.budgets.get((dataset, table.reference))
        if table.test_across_budgets or not cell.across_budgets:
            cell.comparison = compare(reference_runs, scored, table.alpha)
    return cell


def _paper(table, dataset, method, length):
    paper_dataset, train = table.paper_map.get(dataset), table.train_length.get(dataset)
    if paper_dataset is None or train is None:
        return None
    cell = paper_cell(paper_dataset, length / train, method)
    return None if cell is None else f"{fmt(cell[0])} ± {fmt(cell[1], cell[0])}"  # as our cells are written


# ---------------------------------------------------------------- rendering

def fmt(value: float, like: float | None = None) -> str:
    """Three significant figures the way the paper prints them (23.9, 3.40, 5507)."""
    scale = abs(like if like is not None else value)
    return f"{value:.0f}" if scale >= 100 else f"{value:.1f}" if scale >= 10 else f"{value:.2f}"


def cell_text(cell: Cell | None) -> str:
    if cell is None:
        return "—"
    if cell.skipped:
        return "n/a"
    text = fmt(cell.ppl_mean) + (f" ± {fmt(cell.ppl_std, cell.ppl_mean)}" if cell.ppl_std is not None else "")
    mark = cell.comparison.mark if cell.comparison else ""
    return text + mark + (ACROSS_BUDGETS if mark and cell.across_budgets else "")


def budget_text(budget) -> str:
    """`600 steps, 614k tokens` (each budget of a label's runs, when its seeds differ)."""
    if not budget:
        return "—"
    return " / ".join(f"{steps} steps" + (f", {_tokens(tokens)} tokens" if tokens is not None else "")
                      for steps, tokens in budget)


def _tokens(tokens: int) -> str:
    for unit, size in (("G", 10**9), ("M", 10**6), ("k", 10**3)):
        if tokens >= size:
            return f"{tokens / size:.3g}{unit}"
    return str(tokens)


def _columns(table, dataset):
    """(header, function(length) -> text) per column of one dataset, paper columns beside ours."""
    columns = []
    for method in table.methods[dataset]:
        columns.append((method.display, lambda L, m=method: cell_text(table.cells.get((dataset, m, L)))))
        if dataset in table.paper_map and any(k[2] == method for k in TABLE3):
            columns.append((f"{method.display} (paper, {table.paper_map[dataset]})",
                            lambda L, m=method: (getattr(table.cells.get((dataset, m, L)), "paper", None) or "")))
    return columns


def _footnote(table, dataset):
    comparisons = [c.comparison for (d, _, _), c in table.cells.items() if d == dataset and c.comparison]
    seeds = sorted({c.seeds for (d, _, _), c in table.cells.items() if d == dataset and c.seeds})
    spread = "one seed per method" if seeds == [1] else f"mean ± std over {'/'.join(map(str, seeds))} seeds"
    reference = getattr(table.reference, "display", table.reference)
    lines = [f"Perplexity ({table.mode}), {spread}. "
             + tests_note([(c.test, c.seeds) for c in comparisons], reference, table.alpha) + " Tests are on loss (log-perplexity)."]
    across = sorted({m.display for (d, m, _), c in table.cells.items() if d == dataset and c.across_budgets})
    if across and table.test_across_budgets:
        lines.append(f"{ACROSS_BUDGETS}: tested against {reference} although trained for another budget "
                     f"({', '.join(across)}; --test-across-budgets).")
    elif across:
        lines.append(f"Not tested against {reference}: {', '.join(across)}, trained for another budget "
                     "(--test-across-budgets tests them anyway, marked).")
    if any(c.skipped for (d, _, _), c in table.cells.items() if d == dataset):
        lines.append("n/a: the method cannot score that length (it embeds fewer positions).")
    if dataset in table.paper_map:
        lines.append(f"Paper columns: the KERPLE paper's own Table 3 numbers for {table.paper_map[dataset]} "
                     f"(162M model trained at {PAPER_TRAIN_LENGTH} tokens), at the same ratio L / train length; "
                     "not this reproduction's.")
    return " ".join(lines)


def _row_label(table, dataset, length):
    train = table.train_length.get(dataset)
    return f"{length} ({length / train:g}×)" if train else str(length)


def render_markdown(table: Table3) -> str:
    out = []
    for dataset in table.datasets:
        columns = _columns(table, dataset)
        train = table.train_length.get(dataset)
        out.append(f"**{md_cell(dataset)}** (trained at {train if train else 'several lengths'})\n")
        out.append(md_row(["L", *(h for h, _ in columns)]))
        out.append("|---|" + "---|" * len(columns))
        out.append(md_row(["trained", *(_budget_of(table, dataset, h) for h, _ in columns)]))
        for length in table.lengths:
            out.append(md_row([_row_label(table, dataset, length), *(f(length) for _, f in columns)]))
        out.append("\n" + _footnote(table, dataset) + "\n")
    return "\n".join(out)


def _budget_of(table, dataset, header) -> str:
    method = next((m for m in table.methods[dataset] if m.display == header), None)
    return budget_text(table.budgets.get((dataset, method))) if method is not None else ""


def _tex(text: str) -> str:
    return (tex_text(text).replace("_", r"\_").replace("±", r"$\pm$").replace(REFERENCE_BETTER, r"$^\dagger$")
            .replace(REFERENCE_WORSE, r"$^\ddagger$")
            .replace("×", r"$\times$").replace("—", "--").replace("α", r"$\alpha$"))


def render_latex(table: Table3) -> str:
    groups = [(d, _columns(table, d)) for d in table.datasets]
    spec = "r" + "".join("|" + "c" * len(cols) for _, cols in groups)
    lines = [r"\begin{tabular}{" + spec + "}", r"\toprule",
             " & " + " & ".join(rf"\multicolumn{{{len(cols)}}}{{c}}{{{_tex(d)}}}" for d, cols in groups) + r" \\",
             "L & " + " & ".join(_tex(h) for _, cols in groups for h, _ in cols) + r" \\",
             "trained & " + " & ".join(_tex(_budget_of(table, d, h)) for d, cols in groups for h, _ in cols) + r" \\",
             r"\midrule"]
    for length in table.lengths:
        lines.append(f"{length} & " + " & ".join(_tex(f(length)) for _, cols in groups for _, f in cols) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    notes = " ".join(_footnote(table, d) for d in table.datasets)
    return "\n".join(lines) + "\n% " + _tex(notes).replace("\n", " ") + "\n"


def render_csv(table: Table3) -> str:
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["dataset", "train_length", "length", "method", "train_steps", "train_tokens", "mode", "ppl_mean",
                     "ppl_std", "loss_mean", "seeds", "reference", "p_value", "paired_over", "pairs", "dagger",
                     "reference_worse", "test", "across_budgets", "skipped", "paper"])
    for (dataset, method, length), c in sorted(table.cells.items(),
                                               key=lambda kv: (kv[0][0], kv[0][2], method_sort_key(kv[0][1]))):
        comp = c.comparison
        budget = table.budgets.get((dataset, method)) or [(None, None)]
        writer.writerow([dataset, table.train_length.get(dataset), length, method.display,
                         "/".join(str(b[0]) for b in budget), "/".join(str(b[1]) for b in budget), table.mode,
                         c.ppl_mean, c.ppl_std, c.loss_mean, c.seeds, getattr(table.reference, "display", table.reference),
                         comp.p_value if comp else None, comp.over if comp else None, comp.pairs if comp else None,
                         comp.dagger if comp else None, comp.reference_worse if comp else None,
                         comp.test if comp else None, c.across_budgets, c.skipped, c.paper])
    return buffer.getvalue()


RENDERERS = {"md": render_markdown, "tex": render_latex, "csv": render_csv}


def _paper_map(items):
    if items is None:
        return {}
    if not items:
        return dict(DEFAULT_DATASET_MAP)
    known = sorted({k[0] for k in TABLE3})
    mapping = {}
    for item in items:
        ours, _, theirs = item.partition("=")
        if not ours or theirs not in known:
            raise ResultFileError(f"--paper {item!r}: write OUR_DATASET=PAPER_DATASET with PAPER_DATASET one of "
                                  f"{known} (e.g. --paper stdlib=GitHub)")
        mapping[ours] = theirs
    return mapping


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_selection_arguments(parser)
    parser.add_argument("--mode", default="nonoverlap", choices=mode_names(),
                        help="evaluation mode to read (megatron/evaluation/modes/)")
    parser.add_argument("--reference", default="kerple_log", help="run (label or method) the † / ‡ marks compare against")
    parser.add_argument("--test-across-budgets", action="store_true",
                        help="also test runs trained for another budget (steps, tokens) than the reference; marked "
                             + ACROSS_BUDGETS)
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the t-tests")
    parser.add_argument("--paper", nargs="*", metavar="OURS=PAPER",
                        help="add the paper's numbers beside ours; default map " +
                        ", ".join(f"{k}={v}" for k, v in DEFAULT_DATASET_MAP.items()))
    parser.add_argument("--train-logs", nargs="+", metavar="RUN_DIR",
                        help="training log folders for Table 4 (sec/step)")
    parser.add_argument("--format", choices=tuple(RENDERERS), default="md", help="what to print")
    parser.add_argument("--out", help="also write table3.{md,tex,csv} (and table4.*) into this folder")
    add_ruler_arguments(parser)
    args = parser.parse_args(argv)
    problem = args.out and folder_problem(args.out, "--out")
    if problem:  # before the tables are computed and printed
        raise ResultFileError(problem)

    documents = selected_documents(args)
    table = build_table3(documents, args.mode, args.reference, args.alpha, _paper_map(args.paper),
                         args.test_across_budgets)
    print(RENDERERS[args.format](table))
    # --- RULER and effective-length tables (issue 37): printed where eval.py wrote RULER results ---
    print(long_context_tables(args, documents), end="")
    # --- end of the RULER hook ---
    speeds = speed_table(args.train_logs) if args.train_logs else None
    if speeds:
        print(render_table4(speeds, args.format, args.paper is not None))
    if args.out:
        out = pathlib.Path(args.out)
        for ext, render in RENDERERS.items():
            (out / f"table3.{ext}").write_text(render(table))
            if speeds:
                (out / f"table4.{ext}").write_text(render_table4(speeds, ext, args.paper is not None))
        print(f"wrote {out}/table3.{{md,tex,csv}}" + (" and table4.*" if speeds else ""), file=sys.stderr)


if __name__ == "__main__":
    run_cli(main)
