"""Retrieval-probe result files -> tables: accuracy per method and length, and the answer's negative
log-probability with paired tests against a reference method.

    python -m tools.analysis.probe_table eval_results/*.json [--mode passkey] [--reference kerple_log]
        [--method/--name/--seed/--length ...] [--rename OLD=NEW ...]

Accuracy is greedy exact match (teacher-forced top-1 where greedy decoding was off), the mean over the
grid's depths and samples, then mean ± std over seeds. The answer NLL is the answer tokens' mean negative
log-probability (nats). Every run scores byte-identical prompts (the probes are made from eval-seed
alone), so sample i of one run pairs with sample i of another. † / ‡ mark lengths where the reference's
NLL is significantly lower / higher: across seeds when the runs have several, else paired over samples
(significance.py; the table's heading says which test).
"""
import argparse
import sys

import numpy as np
from scipy import stats

from megatron.evaluation.results import ResultFileError
from megatron.neox_arguments import run_cli
from .result_selection import add_selection_arguments, selected_documents
from .results_index import index_results, method_sort_key
from .significance import mark, seed_aware_test, tests_note
from .table_text import md_cell, md_row


def probe_modes(documents) -> list[str]:
    """The modes of these result files whose records are probe records."""
    return sorted({r["mode"] for d in documents for r in d["results"] if "probe_logprob" in r})


def correct(record) -> np.ndarray:
    """Per sample (depth-major): 1.0 where the answer was retrieved."""
    hits = record.get("probe_greedy_exact")
    return np.array(hits if hits is not None else record["probe_top1"], dtype=float)


def scored_by(records) -> str:
    return ("greedy exact match" if all(r.get("probe_greedy_exact") is not None for r in records)
            else "teacher-forced top-1")


def paired(reference: dict, other: dict, keep=None):
    """(reference NLLs, other NLLs) over the (seed, sample) pairs the two share, for {seed: record} of one
    length; `keep(record) -> bool mask` selects samples (e.g. needles far from the question)."""
    ref, oth = [], []
    for seed in sorted(set(reference) & set(other)):
        a, b = reference[seed], other[seed]
        if a["probe_keys"] != b["probe_keys"]:
            raise ResultFileError(
                f"the probes at length {a['length']} ({a['mode']}) differ between runs (different keys): they were "
                "made with different eval-seed, probe-depths or probe-samples; re-evaluate both with the same ones")
        mask = keep(a) if keep else np.ones(len(a["chunk_losses"]), dtype=bool)
        ref += list(np.array(a["chunk_losses"])[mask])
        oth += list(np.array(b["chunk_losses"])[mask])
    return np.array(ref), np.array(oth)


def _samples(reference: dict, other: dict):
    """The per-sample NLLs of two single-seed records, paired (the same probes, whatever their seeds)."""
    seed = reference.get("seed", 0)
    return paired({seed: reference}, {seed: other})


def paired_p(ref: np.ndarray, oth: np.ndarray) -> float | None:
    if len(ref) < 2 or np.all(ref == oth):
        return None
    return float(stats.ttest_rel(ref, oth).pvalue)


def probe_tables(documents, mode: str, reference: str = "kerple_log", alpha: float = 0.05) -> str:
    """Markdown: per dataset, the accuracy table and the answer-NLL table (with daggers)."""
    index = index_results(documents, mode)
    if not index:
        raise ResultFileError(f"no {mode} records in the result files; evaluate with eval-modes including {mode}")
    out = []
    for dataset in sorted(index):
        methods = sorted(index[dataset], key=method_sort_key)
        lengths = sorted({L for m in methods for L in index[dataset][m]})
        records = [r for m in methods for by_seed in index[dataset][m].values() for r in by_seed.values()]
        header = md_row(["length", *(m.display for m in methods)]) + "\n|---|" + "---|" * len(methods)
        accuracy, nll, used = [header], [header], []
        for L in lengths:
            acc_cells, nll_cells = [], []
            ref = next((index[dataset][m].get(L, {}) for m in methods if reference in (m, m.display)), {})
            for m in methods:
                by_seed = index[dataset][m].get(L, {})
                if not by_seed:
                    acc_cells.append("")
                    nll_cells.append("")
                    continue
                per_seed = [correct(r).mean() for r in by_seed.values()]
                spread = f" ± {np.std(per_seed, ddof=1):.2f}" if len(per_seed) > 1 else ""
                acc_cells.append(f"{np.mean(per_seed):.2f}{spread}")
                losses = np.mean([r["loss"] for r in by_seed.values()])
                found = ""
                if ref and reference not in (m, m.display):
                    test, p, _, a, b = seed_aware_test(ref, by_seed, lambda r: r["loss"], _samples)
                    found = mark(p, a, b, alpha, lower_is_better=True)
                    used.append((test, (len(ref), len(by_seed))))
                nll_cells.append(f"{losses:.3f}{found}")
            accuracy.append(md_row([L, *acc_cells]))
            nll.append(md_row([L, *nll_cells]))
        seeds = sorted({s for m in methods for by_seed in index[dataset][m].values() for s in by_seed})
        out += [f"**{md_cell(dataset)}, `{mode}`: accuracy** ({scored_by(records)}, mean over depths and samples; "
                f"mean ± std over seeds {', '.join(map(str, seeds))})\n", *accuracy, "",
                f"**{dataset}, `{mode}`: answer NLL** (nats per answer token, mean over samples and seeds). "
                f"{tests_note(used, reference, alpha, better='lower', unit='samples')}\n",
                *nll, ""]
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_selection_arguments(parser)
    parser.add_argument("--mode", help="the probe mode (default: every probe mode in the files)")
    parser.add_argument("--reference", default="kerple_log", help="method the † / ‡ marks compare against")
    parser.add_argument("--alpha", type=float, default=0.05)
    args = parser.parse_args(argv)
    documents = selected_documents(args)
    modes = [args.mode] if args.mode else probe_modes(documents)
    if not modes:
        raise ResultFileError("none of these result files has probe records; evaluate with a probe mode "
                              "(passkey, kv-retrieval) in eval-modes")
    for mode in modes:
        sys.stdout.write(probe_tables(documents, mode, args.reference, args.alpha) + "\n")


if __name__ == "__main__":
    run_cli(main)
