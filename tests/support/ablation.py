"""Hand-made result files of an ablation (tests/reproduce/test_reproduce_ablation.py judges them in-process,
tests/e2e/reproduce/test_reproduce_ablation.py renders their report): a method's runs with and without its
training variants, and the sweep that names them."""
import numpy as np

from megatron.evaluation.results import SCHEMA, summarize

T, LENGTHS, SEEDS = 64, (64, 128, 256, 512, 1024), (1, 2, 3)


def documents(levels: dict, chunks: int = 40, seed_noise: float = 0.02, run_noise: float = 0.005,
              chunk_noise: float = 0.01) -> list[dict]:
    """Result files of hand-made runs: `levels[method](L)` is the mean loss at length L; every run scores the
    same chunks (a per-chunk difficulty shared by all runs), with an offset per seed that every method shares
    (paired over seeds, it cancels) and a little noise of each run's own."""
    rng, out = np.random.default_rng(0), []
    for method, level in levels.items():
        for seed in SEEDS:
            offset = np.random.default_rng([seed]).normal(0, seed_noise) + rng.normal(0, run_noise)  # mostly shared
            records = []
            for L in LENGTHS:
                difficulty = np.random.default_rng([L]).normal(0, 0.2, (chunks, 1))
                losses = level(L) + offset + difficulty + rng.normal(0, chunk_noise, (chunks, 1)) + np.zeros((chunks, 2))
                records.append({"length": L, "mode": "nonoverlap",
                                **summarize(losses, L, "nonoverlap", np.arange(chunks) * L)})
            out.append(result_document(method, seed, records))
    return out


def result_document(method: str, seed: int, records: list[dict]) -> dict:
    """A hand-made run's result file: `method` (`pos_emb+variant`) at `seed`, trained at T for 10 steps."""
    pos_emb, _, variant = method.partition("+")
    name = f"code_{method}_seed{seed}_step10_0123abcd"
    return {"schema": SCHEMA, "path": name, "results": records, "evaluation": {"eval_seed": 0},
            "run": {"name": name, "method": method, "pos_emb": pos_emb, "variant": variant or None,
                    "attention_window": None, "seed": seed, "dataset": "code", "train_length": T,
                    "checkpoint_step": 10}}


FLAT = lambda L: 2.0  # noqa: E731
RISING = lambda L: 2.0 + 0.12 * np.log2(L / T)  # noqa: E731  ppl x1.62 at 16x: past DEGRADE_RATIO
SLIGHTLY_WORSE = lambda L: 2.0 + (0.05 if L >= 8 * T else 0.0)  # noqa: E731  worse, ratio ~1.05


SWEEP = """name: abl
scale: test
profile: [configs/reproduce/mini.yml]
methods: [kerple_log, alibi]
training_variants:
  kerple_log:
    per-layer: {pos-emb-per-layer: true}
    per-layer+bf16: {pos-emb-per-layer: true, precision: bf16}
ablation: {method: kerple_log, anchor: alibi}
seeds: [1, 2]
datasets: [stdlib]
data: {stdlib: {builder: stdlib, prefix: data/stdlib/stdlib_text_document}}
evaluation: {eval-lengths: [64, 512], eval-chunks: 40}
chunk_subsets: [5]
"""
