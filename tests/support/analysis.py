"""Result files written by hand with a known loss per length, for the analysis tools' tests."""
import numpy as np

from megatron.evaluation.results import SCHEMA, summarize, write_atomic

CHUNK_OFFSETS = np.array([-0.1, 0.1, -0.05, 0.05])  # zero mean: a run's loss is its seed loss exactly


def write_run(folder, dataset, method, seed, train_length, losses_by_length, starts=None, skipped=()):
    """A result file whose (length -> [chunks, L] loss matrix) is given; `skipped` lengths are skipped."""
    results = []
    for length, losses in losses_by_length.items():
        chunk_starts = np.arange(len(losses)) * length if starts is None else starts
        results.append(summarize(np.repeat(losses[:, None], length, axis=1), length, "nonoverlap", chunk_starts))
    results += [{"length": length, "mode": "nonoverlap", "skipped": "embeds at most 64 positions"}
                for length in skipped]
    name = f"{dataset}_{method}_seed{seed}"
    write_atomic(folder / f"{name}.json", {
        "schema": SCHEMA, "results": results,
        "run": {"name": name, "method": method, "pos_emb": method, "seed": seed, "dataset": dataset,
                "train_length": train_length, "checkpoint_step": 100}})
