"""Hand-made probe records of a retrieval ablation (tests/reproduce/test_reproduce_retrieval_ablation.py judges
them in-process, tests/e2e/reproduce/test_reproduce_retrieval_ablation.py renders their report), and the sweep
that names its training variants."""
import numpy as np

from megatron.evaluation.results import summarize
from tests.support.ablation import result_document

LENGTHS, SEEDS, SAMPLES = (64, 128, 512, 1024), (1, 2, 3), 40   # long lengths: 512 and 1024 (8x T)


def first(n):
    """Hits of 40 samples: the first n right."""
    return [1] * n + [0] * (SAMPLES - n)


def probe_record(L, hits):
    n = len(hits)
    nll = [0.1 if h else 3.0 for h in hits]
    return {"length": L, "mode": "kv-retrieval", "loss": float(np.mean(nll)), "ppl": float(np.exp(np.mean(nll))),
            "chunks": n, "tokens": n * 4, "stderr": float(np.std(nll, ddof=1) / np.sqrt(n)), "chunk_starts": list(range(n)), "chunk_losses": nll, "probe_depths": [0.0, 0.5, 1.0, 0.25, 0.75],
            "probe_samples": n // 5, "probe_keys": [L * 1000 + i for i in range(n)],  # the same for every run at L
            "probe_logprob": [-x for x in nll], "probe_top1": [bool(h) for h in hits],
            "probe_greedy_exact": [bool(h) for h in hits], "probe_distance": [L // 2] * n}


def documents(hits: dict, with_ppl: bool = False) -> list[dict]:
    """`hits[method](L, seed)` -> 40 outcomes; every run scores the same probe prompts at a length."""
    out = []
    for method, outcome in hits.items():
        for seed in SEEDS:
            records = [probe_record(L, outcome(L, seed)) for L in LENGTHS]
            if with_ppl:  # flat plain-text loss, a little noise per run
                rng = np.random.default_rng([seed, len(method)])
                records += [{"length": L, "mode": "nonoverlap",
                             **summarize(2.0 + rng.normal(0, 0.01) + np.zeros((8, 2)), L, "nonoverlap", np.arange(8) * L)}
                            for L in LENGTHS]
            out.append(result_document(method, seed, records))
    return out


def at(T_hits, long_hits):
    """Outcomes: T_hits at the training length and 128, long_hits(L) at 512 and 1024."""
    return lambda L, seed: T_hits if L < 512 else long_hits(L)


SWEEP = """name: abl
scale: test
profile: [configs/reproduce/mini.yml]
methods: [kerple_log, alibi]
training_variants:
  kerple_log:
    per-layer: {pos-emb-per-layer: true}
seeds: [1, 2]
datasets: [stdlib]
data: {stdlib: {builder: stdlib, prefix: data/stdlib/stdlib_text_document}}
evaluation: {eval-lengths: [64, 512], eval-modes: [nonoverlap, kv-retrieval], eval-chunks: 40}
"""
