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
from .results_index import method_sort_key

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
            document["path"] = str(path)
            documents.append(document)
    return documents


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
            rows.append(f"| {label} | " + " | ".join(cells) + " |")
        out.append(f"RULER {task}: score (mean over samples; seeds averaged) [bootstrap 95% interval]"
                   + (f"; {tests_note(used, reference, alpha, better='higher', unit='samples')}" if ref is not None else ""))
        out.append("| length | " + " | ".join(str(m) for m in methods) + " |")
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
