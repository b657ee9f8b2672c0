"""Result files grouped the way tables and figures read them: dataset -> method -> length -> seed.

A method here is the label a run is shown under (identity.Method: its run-name, else its method and
what it was trained with). Files of one run (one checkpoint: config hash, seed, step) found in several
folders are one run: their records merge. Where a run holds several records of one length and mode
(scored with different eval-chunks), the one scored like most other runs at that length is taken (so
runs pair over the same chunks), then the one with the most chunks. Two different runs under one label
are refused, and so are two files of one run whose numbers differ for one length, mode and eval-chunks
(neither is quietly taken: both files are named)."""
import re
from collections import Counter, defaultdict

from megatron.evaluation.identity import Method
from megatron.evaluation.results import ResultFileError
from megatron.quoting import quote

# Paper order first (Table 3), then anything else alphabetically; a method's windowed run and its
# evaluation-only variants (alphabetically) follow it.
METHOD_ORDER = ("kerple_log", "kerple_power", "kerple_log3", "kerple_bias_weight", "alibi", "t5",
                "rotary", "sinusoidal")


def method_sort_key(method: Method):
    rank = METHOD_ORDER.index(method.pos_emb) if method.pos_emb in METHOD_ORDER else len(METHOD_ORDER)
    # Variants by label, numbers by value (yarn4 before yarn32): never by input order, which varies.
    variant = re.sub(r"\d+", lambda number: number.group().zfill(12), method.variant or "")
    return rank, method.pos_emb, variant, method.window or 0, getattr(method, "label", None) or ""


def index_results(documents: list[dict], mode: str) -> dict:
    """{dataset: {method: {length: {seed: record}}}} for one mode; one run per (dataset, method, seed).
    Methods are identity.Method labels, built from each file's run."""
    candidates = defaultdict(list)  # (dataset, method, length, seed) -> [(eval-chunks, record, file)]
    owner = {}
    for doc in documents:
        run = doc["run"]
        method = Method.of_run(run)
        key = (run["dataset"], method, run["seed"])
        if key in owner and owner[key][0] != run_identity(run):
            raise ResultFileError(_two_runs_message(key, owner[key][1], doc))
        owner.setdefault(key, (run_identity(run), doc))
        for record in doc["results"]:
            if record["mode"] == mode:
                chunks = record.get("eval_chunks", doc.get("evaluation", {}).get("eval_chunks"))
                held = candidates[run["dataset"], method, record["length"], run["seed"]]
                for other_chunks, other, other_path in held:
                    if other_chunks == chunks and _disagree(other, record):
                        raise ResultFileError(_conflict_message(method, run, record, chunks, other_path, doc.get("path"),
                                                                other))
                held.append((chunks, record, doc.get("path", "a result document")))
    settings = Counter((dataset, length, chunks) for (dataset, _, length, _), held in candidates.items()
                       for chunks in {c for c, _, _ in held})
    index = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    for (dataset, method, length, seed), held in candidates.items():
        _, record, _ = max(held, key=lambda c: (settings[dataset, length, c[0]], _chunks(c[1])))
        index[dataset][method][length][seed] = record
    return index


def run_identity(run: dict) -> tuple:
    """What makes two result files one run's: one checkpoint (config hash, seed, step) evaluated the same
    way per run (short label: per-run options, window)."""
    return (run.get("config_hash"), run["seed"], run.get("checkpoint_step"), str(Method.of_run(run).short),
            run["dataset"])


UNSCORED = ("seconds", "peak_memory_mb")  # how long and how much memory the scoring took, not what it scored


def _scores(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in UNSCORED}


def _disagree(first: dict, second: dict) -> bool:
    """Two records of one run, length, mode and chunks whose numbers differ (a field only one of them has,
    written by another version, is no disagreement)."""
    a, b = _scores(first), _scores(second)
    return any(a[k] != b[k] for k in set(a) & set(b))


def _conflict_message(method, run, record, chunks, first, second, other) -> str:
    numbers = (f"loss {other['loss']:.6g} vs {record['loss']:.6g}" if isinstance(record.get("loss"), (int, float))
               and isinstance(other.get("loss"), (int, float)) and other["loss"] != record["loss"] else
               f"{sorted(k for k in set(_scores(record)) | set(_scores(other)) if record.get(k) != other.get(k))} differ")
    return (f"{first} and {second} are the same run ({quote(method.display)}, dataset {run['dataset']}, seed {run['seed']}, "
            f"step {run.get('checkpoint_step')}, config hash {str(run.get('config_hash'))[:8]}) but disagree at length "
            f"{record['length']}, mode {record['mode']}, eval-chunks {'unset' if chunks is None else chunks}: {numbers}. One of them is stale or was "
            "scored another way (dtype, data); keep the one you trust (move the other out of the folders given), or "
            "give only one of the folders.")


def _chunks(record: dict) -> int:
    return -1 if "skipped" in record else record["chunks"]


def _two_runs_message(key, first: dict, second: dict) -> str:
    def describe(doc):
        run = doc["run"]
        return (f"{doc['path']} (config hash {str(run.get('config_hash'))[:8]}, step {run.get('checkpoint_step')}, "
                f"{Method.of_run(run).short})")
    hashes = [str(doc["run"].get("config_hash") or "")[:8] for doc in (second, first)]
    other = next((h for h in hashes if h), str(Method.of_run(second["run"]).short))
    return (f"two different runs are labelled {key[1].display!r} (dataset {key[0]}, seed {key[2]}): {describe(first)} "
            f"and {describe(second)}. A label names one run: give the runs different run-names, show one under "
            f"another label (e.g. --rename {other}=NEW), or leave one out (--method, --name, --seed, or fewer folders).")


def budgets(documents: list[dict]) -> dict:
    """{(dataset, method): sorted [(steps, tokens)]} the runs of each label were trained for; tokens None for
    result files written before they were recorded."""
    seen = defaultdict(set)
    for doc in documents:
        run = doc["run"]
        seen[run["dataset"], Method.of_run(run)].add((run.get("train_steps", run.get("checkpoint_step")),
                                                       run.get("train_tokens")))
    return {key: sorted(values, key=lambda v: (v[0], v[1] or 0)) for key, values in seen.items()}


def train_lengths(documents: list[dict]) -> dict:
    """{dataset: train length} where every run of the dataset shares one (else None)."""
    seen = defaultdict(set)
    for doc in documents:
        seen[doc["run"]["dataset"]].add(doc["run"]["train_length"])
    return {dataset: next(iter(s)) if len(s) == 1 else None for dataset, s in seen.items()}

