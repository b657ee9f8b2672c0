"""RULER results (eval.py's lm-eval result files) -> a table per task: rows are lengths, columns the methods;
a cell is the score (mean over samples, then over seeds) and its bootstrap 95% interval.

    python -m tools.analysis.ruler_table eval_results/tiny [--reference kerple_log]

Reads `<folder>/lm_eval/*.json` (eval.py writes them there). Every run that shares a tokenizer and
eval-seed scores the same RULER samples (megatron/evaluation/ruler.py), so sample i of one run pairs
with sample i of another. † / ‡ mark lengths where the reference method scores significantly higher /
lower: across seeds when the runs have several, else paired over the samples both have (significance.py;
the table's heading says which test)."""
import argparse
import json
import pathlib
from collections import defaultdict

import numpy as np

from megatron.evaluation.identity import Method
from megatron.evaluation.results import ResultFileError
from megatron.neox_arguments import run_cli
from .significance import mark, seed_aware_test, tests_note
from megatron.quoting import quote
from .results_index import method_sort_key
from .table_text import md_cell, md_row

SCHEMA = "neox-lm-eval/1"


def load_ruler(folder) -> list[dict]:
    """The lm-eval result files under `folder`/lm_eval that hold RULER records (none: an empty list)."""
    documents = []
    for path in sorted((pathlib.Path(folder) / "lm_eval").glob("*.json")):
        try:
            document = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as err:
            raise ResultFileError(f"cannot read lm-eval result {path}: {err}") from None
        if not (isinstance(document, dict) and document.get("schema") == SCHEMA
                and isinstance(document.get("run"), dict)):
            raise ResultFileError(f"{path} is not an lm-eval result file of schema {SCHEMA}; eval.py writes them.")
        if isinstance(document.get("ruler"), dict) and document["ruler"]:
            if problem := ruler_problem(document):
                raise ResultFileError(f"{path} is not an lm-eval result file of schema {SCHEMA}: {problem}. eval.py "
                                      "writes these files; re-run it to regenerate this one, or move it out of the folder.")
            document["path"] = str(path)
            documents.append(document)
    return documents


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)


def ruler_problem(document: dict) -> str | None:
    """What the tables would trip over in a RULER result document (the field and its value), else None: checked
    as load_result checks a perplexity file, so a hand-edited or foreign file is named, not a numpy traceback."""
    run = document["run"]
    if not isinstance(run.get("seed"), int) or isinstance(run.get("seed"), bool):
        return f"run.seed is {quote(run.get('seed'))}, not an integer"
    if run.get("train_length") is not None and not isinstance(run["train_length"], int):
        return f"run.train_length is {quote(run['train_length'])}, not an integer"
    for task, per_length in document["ruler"].items():
        if not isinstance(per_length, dict):
            return f"ruler.{str(task)[:60]} is {quote(per_length)}, not a mapping of lengths to records"
        for length, record in per_length.items():
            where = f"ruler.{str(task)[:60]}.{str(length)[:20]}"
            if not str(length).isdigit() or int(length) < 1:
                return f"{where}: the length {quote(length)} is not a positive whole number"
            if not isinstance(record, dict):
                return f"{where} is {quote(record)}, not a record"
            if record.get("score") is None:
                continue  # no sample fitted at this length
            if not _number(record["score"]):
                return f"{where}.score is {quote(record['score'])}, not a finite number"
            ci = record.get("ci95")
            if not (isinstance(ci, list) and len(ci) == 2 and all(map(_number, ci))):
                return f"{where}.ci95 is {quote(ci)}, not two finite numbers"
            if not isinstance(record.get("n"), int) or isinstance(record.get("n"), bool):
                return f"{where}.n is {quote(record.get('n'))}, not a count"
            ids, scores = record.get("doc_ids"), record.get("scores")
            if not (isinstance(ids, list) and isinstance(scores, list) and len(ids) == len(scores)):
                return f"{where}: doc_ids and scores are not two lists of one length ({quote(ids, 40)}, {quote(scores, 40)})"
            bad = [v for v in scores if not _number(v)]
            if bad:
                return f"{where}.scores holds {quote(bad[0])}, not a finite number"
    return None


def index_ruler(documents) -> dict:
    """{task: {method: {length: {seed: record}}}}; a record with score None had no sample fitting."""
    index = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    for document in documents:
        method, seed = Method.of_run(document["run"]), document["run"]["seed"]
        for task, per_length in document["ruler"].items():
            for length, record in per_length.items():
                index[task][method][int(length)][seed] = record
    return index


def train_length(documents) -> int | None:
    lengths = {d["run"]["train_length"] for d in documents}
    return lengths.pop() if len(lengths) == 1 else None


def seed_mean(runs: dict) -> tuple[float, float, float] | None:
    """(score, low, high) over the seeds that have scores: the mean of each."""
    scored = [r for r in runs.values() if r.get("score") is not None]
    if not scored:
        return None
    return tuple(float(np.mean([r[k] if k == "score" else r["ci95"][i] for r in scored]))
                 for k, i in (("score", 0), ("ci95", 0), ("ci95", 1)))


def paired_samples(reference: dict, other: dict) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample scores of the doc ids both records (one seed each) have."""
    theirs = dict(zip(other["doc_ids"], other["scores"]))
    pairs = [(score, theirs[doc]) for doc, score in zip(reference["doc_ids"], reference["scores"]) if doc in theirs]
    return np.array([a for a, _ in pairs]), np.array([b for _, b in pairs])


def _scored(runs: dict) -> dict:
    return {seed: r for seed, r in runs.items() if r.get("score") is not None}


def ruler_tables(documents, reference: str = "kerple_log", alpha: float = 0.05) -> str:
    index, trained = index_ruler(documents), train_length(documents)
    out = []
    for task in sorted(index):
        methods = sorted(index[task], key=method_sort_key)
        lengths = sorted({n for m in methods for n in index[task][m]})
        ref = next((m for m in methods if str(m) == reference), None)
        rows, used = [], []
        for length in lengths:
            cells = []
            for method in methods:
                runs = index[task][method].get(length, {})
                mean = seed_mean(runs)
                if mean is None:
                    cells.append("no sample fits" if runs else "")
                    continue
                found = ""
                ref_runs = _scored(index[task][ref].get(length, {})) if ref is not None else {}
                if ref_runs and method != ref:
                    test, p, _, a, b = seed_aware_test(ref_runs, _scored(runs), lambda r: r["score"], paired_samples)
                    found = mark(p, a, b, alpha, lower_is_better=False)
                    used.append((test, (len(ref_runs), len(_scored(runs)))))
                n = sum(r.get("n", 0) for r in runs.values())
                cells.append(f"{mean[0]:.3f}{found} [{mean[1]:.2f}, {mean[2]:.2f}] n={n}")
            label = f"{length}" + (f" ({length / trained:g}×)" if trained else "")
            rows.append(md_row([label, *cells]))
        out.append(f"RULER {md_cell(task)}: score (mean over samples; seeds averaged) [bootstrap 95% interval]"
                   + (f"; {tests_note(used, reference, alpha, better='higher', unit='samples')}" if ref is not None else ""))
        out.append(md_row(["length", *methods]))
        out.append("|---|" + "---|" * len(methods))
        out += rows + [""]
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="eval-results-dir (eval.py wrote its RULER results into its lm_eval/)")
    parser.add_argument("--reference", default="kerple_log", help="method the † / ‡ marks compare against")
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level of the t-tests")
    args = parser.parse_args(argv)
    documents = load_ruler(args.results)
    if not documents:
        raise ResultFileError(f"no RULER results in {args.results}/lm_eval; run eval.py with a RULER task, e.g. "
                              "--eval_tasks niah_single_1.")
    print(ruler_tables(documents, args.reference, args.alpha))


if __name__ == "__main__":
    run_cli(main)
