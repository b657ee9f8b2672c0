"""Effective length of every method for every measure, from the result files already written: one table.

    python -m tools.analysis.effective_length eval_results/tiny [--threshold 0.85] [--ppl-factor 1.2]  (the defaults)

The effective length is the longest evaluation length up to which a model keeps what it does at the
reference length (the training length, or the shortest length measured above it where nothing could
be measured there, e.g. RULER prompts longer than a 64-token training length): walking up from the
reference, the last length before the first one that fails (a model that recovers at a longer length
after failing is not credited with it, as in RULER):
- perplexity (evaluate.py's nonoverlap and sliding modes): fails when its perplexity exceeds
  `ppl-factor` x the reference's;
- the passkey and kv-retrieval probes (retrieval accuracy) and every RULER task (eval.py's score):
  fails when it falls below `threshold` (0.85: RULER's and NoLiMa's 85%) x the reference's score.
Seeds are averaged per length (perplexity: exp of the mean loss). How certain it is: a bootstrap that
redraws the chunks / samples of every (seed, length) with replacement; the interval is the 2.5-97.5%
range of the effective lengths of the draws (draws where the reference score is 0 have none).
Censored: where no measured length fails, the effective length is at least the longest one measured,
printed `≥ 2048`. Every length measured counts (a tool's display filter such as make_tables --length
changes neither the reference nor the walk)."""
import argparse
import math
import pathlib
from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from megatron.evaluation.identity import Method
from megatron.evaluation.results import ResultFileError, load_results
from megatron.neox_arguments import run_cli
from .probe_table import correct
from .results_index import method_sort_key
from .ruler_table import load_ruler
from .table_text import md_row

PPL_MODES = ("nonoverlap", "sliding")
DRAWS = 1000
THRESHOLD = 0.85  # RULER's and NoLiMa's share of the reference score
PPL_FACTOR = 1.2


def add_criteria_arguments(parser) -> None:
    parser.add_argument("--threshold", type=float, default=THRESHOLD, help="fraction of the reference score kept")
    parser.add_argument("--ppl-factor", type=float, default=PPL_FACTOR, help="perplexity allowed, x the reference's")


def check_criteria(threshold: float, ppl_factor: float) -> None:
    if not 0 < threshold <= 1 or not ppl_factor >= 1:
        raise ResultFileError(f"--threshold must be in (0, 1] and --ppl-factor >= 1, got {threshold:g} and "
                              f"{ppl_factor:g}.")


@dataclass
class Curve:
    """One measure of one method: per length, per seed, the per-sample values."""
    measure: str
    method: Method
    lower_is_better: bool  # perplexity (values are chunk losses; the statistic is exp(mean))
    values: dict  # {length: {seed: np.ndarray}}
    train_length: int


def statistic(per_seed: dict, lower_is_better: bool) -> float:
    means = [float(np.mean(v)) for v in per_seed.values()]
    return math.exp(min(np.mean(means), 709.0)) if lower_is_better else float(np.mean(means))


def effective_length(stats: dict, reference: int, *, lower_is_better: bool, threshold: float,
                     ppl_factor: float) -> int | None:
    """The longest length, walking up from `reference`, before the first that fails; None when the
    reference's score is 0 (nothing to keep)."""
    base = stats[reference]
    if not lower_is_better and not base > 0:
        return None
    best = reference
    for length in sorted(n for n in stats if n > reference):
        ok = stats[length] <= ppl_factor * base if lower_is_better else stats[length] >= threshold * base
        if not ok:
            break
        best = length
    return best


def reference_length(curve: Curve) -> int | None:
    """The training length when measured, else the shortest length measured above it."""
    measured = sorted(n for n, seeds in curve.values.items() if seeds and n >= curve.train_length)
    return measured[0] if measured else None


def estimate(curve: Curve, threshold: float, ppl_factor: float, draws: int = DRAWS, seed: int = 0) -> dict:
    """{"reference", "effective", "low", "high", "defined", "longest"}: the point estimate, the bootstrap
    interval and the longest length measured (an effective length equal to it is censored: at least that)."""
    reference = reference_length(curve)
    measured = {n: s for n, s in curve.values.items() if s and (reference is not None and n >= reference)}
    if reference is None:
        return {"reference": None, "effective": None, "low": None, "high": None, "defined": 0.0, "longest": None}

    def compute(values):
        stats = {n: statistic(per_seed, curve.lower_is_better) for n, per_seed in values.items()}
        return effective_length(stats, reference, lower_is_better=curve.lower_is_better, threshold=threshold,
                                ppl_factor=ppl_factor)

    rng = np.random.default_rng(seed)
    found = []
    for _ in range(draws):
        redrawn = {n: {s: v[rng.integers(0, len(v), len(v))] for s, v in per_seed.items()}
                   for n, per_seed in measured.items()}
        found.append(compute(redrawn))
    defined = np.array([f for f in found if f is not None], dtype=float)
    low, high = ((int(np.quantile(defined, q, method="inverted_cdf")) for q in (0.025, 0.975)) if defined.size
                 else (None, None))
    return {"reference": reference, "effective": compute(measured), "low": low, "high": high,
            "defined": defined.size / draws, "longest": max(measured)}


def curves(folder) -> list[Curve]:
    """Every measure of every method in `folder` (evaluate.py's files) and `folder`/lm_eval (eval.py's)."""
    folder = pathlib.Path(folder)
    return curves_of(load_results(folder) if any(folder.glob("*.json")) else [], load_ruler(folder))


def curves_of(documents: list, ruler_documents: list) -> list[Curve]:
    """Every measure of every method in evaluate.py's result documents and eval.py's RULER documents."""
    table = defaultdict(lambda: defaultdict(dict))  # (measure, method, lower) -> length -> seed -> values
    trained = {}
    for document in documents:
        method, seed = Method.of_run(document["run"]), document["run"]["seed"]
        for record in document["results"]:
            if "skipped" in record:
                continue
            if "probe_logprob" in record:
                key = (record["mode"], method, False)
                table[key][record["length"]][seed] = correct(record)
            elif record["mode"] in PPL_MODES:
                key = (f"ppl ({record['mode']})", method, True)
                table[key][record["length"]][seed] = np.asarray(record["chunk_losses"], dtype=float)
            else:
                continue
            trained[key] = document["run"]["train_length"]
    for document in ruler_documents:
        method, seed = Method.of_run(document["run"]), document["run"]["seed"]
        for task, per_length in document["ruler"].items():
            key = (task, method, False)
            trained[key] = document["run"]["train_length"]
            for length, record in per_length.items():
                if record.get("score") is not None:
                    table[key][int(length)][seed] = np.asarray(record["scores"], dtype=float)
    return [Curve(measure, method, lower, {n: dict(s) for n, s in values.items()}, trained[(measure, method, lower)])
            for (measure, method, lower), values in table.items()]


def estimates(folder, threshold: float = THRESHOLD, ppl_factor: float = PPL_FACTOR) -> dict:
    """{measure: {method: estimate}} with the train length of each under "train_length"."""
    return estimates_of(curves(folder), threshold, ppl_factor)


def estimates_of(found_curves: list, threshold: float = THRESHOLD, ppl_factor: float = PPL_FACTOR) -> dict:
    out = defaultdict(dict)
    for curve in found_curves:
        found = estimate(curve, threshold, ppl_factor)
        out[curve.measure][curve.method] = {**found, "train_length": curve.train_length}
    return out


def censored(e: dict, length: int | None) -> bool:
    """Whether an effective length (or a bound of its interval) is only a lower bound: nothing longer failed
    because nothing longer was measured."""
    return length is not None and length == e.get("longest")


def length_text(e: dict, length: int) -> str:
    return ("≥ " if censored(e, length) else "") + str(length)


def cell_text(e: dict) -> str:
    if e["reference"] is None:
        return "not measured"
    if e["effective"] is None:
        return f"none (score 0 at {e['reference']})"
    ratio = f"{'≥ ' if censored(e, e['effective']) else ''}{e['effective'] / e['train_length']:g}×"
    interval = f" [{length_text(e, e['low'])}, {length_text(e, e['high'])}]" if e["low"] is not None else ""
    ref = f", ref {e['reference']}" if e["reference"] != e["train_length"] else ""
    return f"{length_text(e, e['effective'])} ({ratio}){interval}{ref}"


def render_table(by_measure: dict, threshold: float, ppl_factor: float) -> str:
    methods = sorted({m for per in by_measure.values() for m in per}, key=method_sort_key)
    rows = [f"Effective length by method (tokens; x training length) [bootstrap 95% interval]: perplexity within "
            f"{ppl_factor:g}x the reference's, scores >= {threshold:g} x the reference's; reference = the training "
            "length, or `ref` where the task cannot be measured there; ≥: nothing failed up to the longest length "
            "measured, so the effective length is at least that",
            md_row(["measure", *methods]), "|---|" + "---|" * len(methods)]
    for measure in sorted(by_measure, key=lambda m: (not m.startswith("ppl"), m)):
        rows.append(md_row([measure, *(cell_text(by_measure[measure][m]) if m in by_measure[measure]
                                        else "" for m in methods)]))
    return "\n".join(rows)


def estimates_of_args(args) -> dict:
    """`estimates` of a command line's results folder and criteria (both tools' one reading of them)."""
    check_criteria(args.threshold, args.ppl_factor)
    by_measure = estimates(args.results, args.threshold, args.ppl_factor)
    if not by_measure:
        raise ResultFileError(f"no perplexity, probe or RULER results in {args.results}; run evaluate.py / eval.py.")
    return by_measure


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", help="eval-results-dir: evaluate.py's files and eval.py's lm_eval/ folder")
    add_criteria_arguments(parser)
    args = parser.parse_args(argv)
    by_measure = estimates_of_args(args)
    print(render_table(by_measure, args.threshold, args.ppl_factor))


if __name__ == "__main__":
    run_cli(main)
