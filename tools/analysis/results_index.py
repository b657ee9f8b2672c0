"""Result files grouped the way tables and figures read them: dataset -> method -> length -> seed."""
import re
from collections import defaultdict

from megatron.evaluation.identity import Method
from megatron.evaluation.results import ResultFileError

# Paper order first (Table 3), then anything else alphabetically; a method's windowed run and its
# evaluation-only variants (alphabetically) follow it.
METHOD_ORDER = ("kerple_log", "kerple_power", "kerple_log3", "kerple_bias_weight", "alibi", "t5",
                "rotary", "sinusoidal")


def method_sort_key(method: Method):
    rank = METHOD_ORDER.index(method.pos_emb) if method.pos_emb in METHOD_ORDER else len(METHOD_ORDER)
    # Variants by label, numbers by value (yarn4 before yarn32): never by input order, which varies.
    variant = re.sub(r"\d+", lambda number: number.group().zfill(12), method.variant or "")
    return rank, method.pos_emb, variant, method.window or 0


def index_results(documents: list[dict], mode: str) -> dict:
    """{dataset: {method: {length: {seed: record}}}} for one mode; one file per (dataset, method, seed).
    Methods are identity.Method labels, built from each file's pos_emb and attention_window."""
    index = defaultdict(lambda: defaultdict(lambda: defaultdict(dict)))
    owner = {}
    for doc in documents:
        run = doc["run"]
        method = Method.of_run(run)
        key = (run["dataset"], method, run["seed"])
        if key in owner:
            raise ResultFileError(
                f"two result files for dataset {key[0]}, method {key[1]}, seed {key[2]}: {owner[key]} and "
                f"{doc['path']} (different checkpoints or configs?); keep one per run in the folder")
        owner[key] = doc["path"]
        for record in doc["results"]:
            if record["mode"] == mode:
                index[run["dataset"]][method][record["length"]][run["seed"]] = record
    return index


def train_lengths(documents: list[dict]) -> dict:
    """{dataset: train length} where every run of the dataset shares one (else None)."""
    seen = defaultdict(set)
    for doc in documents:
        seen[doc["run"]["dataset"]].add(doc["run"]["train_length"])
    return {dataset: next(iter(s)) if len(s) == 1 else None for dataset, s in seen.items()}

