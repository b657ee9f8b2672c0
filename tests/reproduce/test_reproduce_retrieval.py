"""The retrieval section's rule (tools/reproduce/retrieval.py) and the probe tables
(tools/analysis/probe_table.py) on hand-made probe records: each verdict comes out each way, the
paired tests pair by (seed, sample), and a sweep's evaluation-only variants are planned as runs."""
import re

import numpy as np
import pytest

from megatron.evaluation.identity import Method
from megatron.evaluation.results import ResultFileError
from tools.analysis.probe_table import paired, probe_tables
from tools.reproduce.retrieval import retrieval_claim

T = 64
SAMPLES = 8  # per length: the first half far from the question, the second half near


def record(length, hits, nll, keys=None):
    """A probe record of 8 samples: hits/nll are per sample (depth-major), as evaluate.py writes them."""
    n = len(hits)
    return {"length": length, "mode": "kv-retrieval", "loss": float(np.mean(nll)), "chunks": n,
            "chunk_starts": list(range(n)), "chunk_losses": list(map(float, nll)),
            "probe_depths": [0.0, 1.0], "probe_samples": n // 2, "probe_keys": keys or list(range(1000, 1000 + n)),
            "probe_logprob": [-x for x in nll], "probe_top1": [bool(h) for h in hits],
            "probe_greedy_exact": [bool(h) for h in hits],
            "probe_distance": [10 * length] * (n // 2) + [5] * (n // 2)}


def index(full_far_hits, windowed_far_hits, full_nll, windowed_nll, seeds=(1, 2, 3)):
    """{dataset: {method: {length: {seed: record}}}} with the far samples' hits and NLLs given per run."""
    def runs(hits, nll, jitter):
        rng = np.random.default_rng(jitter)
        return {L: {s: record(L, list(hits) + [1] * 4, [x + rng.normal(0, 0.01) for x in nll] + [0.5] * 4)
                    for s in seeds} for L in (128, 512)}
    return {"code": {Method("kerple_log"): runs(full_far_hits, full_nll, 0),
                     Method("kerple_log", T): runs(windowed_far_hits, windowed_nll, 1)}}


def test_retrieval_claim_confirmed_partly_and_not():
    far_nll_low, far_nll_high = [0.5] * 4, [3.0] * 4
    # Retrieves every far needle the windowed run misses, with a lower NLL: confirmed, and the windowed
    # run's far accuracy is 0: the falls-to-chance prediction holds.
    claim, verdict, evidence = retrieval_claim("kerple_log", index([1] * 4, [0] * 4, far_nll_low, far_nll_high), "code", T,
                                               "kv-retrieval")
    assert verdict == "confirmed" and "prediction holds" in evidence
    # Lower NLL but no more exact answers (both miss): partly.
    assert retrieval_claim("kerple_log", index([0] * 4, [0] * 4, far_nll_low, far_nll_high), "code", T, "kv")[1] == "partly confirmed"
    # The windowed run is as good: not confirmed, and its far accuracy 1.0 means the prediction fails.
    claim, verdict, evidence = retrieval_claim("kerple_log", index([1] * 4, [1] * 4, far_nll_high, far_nll_high), "code", T, "kv")
    assert verdict == "not confirmed" and "prediction fails" in evidence


def test_retrieval_claim_needs_both_runs_and_distances():
    full_only = {"code": {Method("kerple_log"): {128: {1: record(128, [1] * 8, [0.5] * 8)}}}}
    assert retrieval_claim("kerple_log", full_only, "code", T, "kv")[1] == "not assessed"
    data = index([1] * 4, [0] * 4, [0.5] * 4, [3.0] * 4)
    for by_seed in data["code"][Method("kerple_log")].values():
        for r in by_seed.values():
            del r["probe_distance"]
    assert "lack probe_distance" in retrieval_claim("kerple_log", data, "code", T, "kv")[2]


def test_pairs_are_by_seed_and_sample_and_need_the_same_prompts():
    a = {1: record(128, [1] * 8, [0.1 * i for i in range(8)]), 2: record(128, [1] * 8, [1.0] * 8)}
    b = {2: record(128, [0] * 8, [2.0] * 8), 3: record(128, [0] * 8, [9.0] * 8)}
    ref, oth = paired(a, b)
    assert list(ref) == [1.0] * 8 and list(oth) == [2.0] * 8  # only seed 2 is shared
    far = paired(a, b, keep=lambda r: np.array(r["probe_distance"]) >= T)
    assert len(far[0]) == 4
    b[2]["probe_keys"] = list(range(2000, 2008))
    with pytest.raises(ResultFileError, match="the probes at length 128 .* differ between runs"):
        paired(a, b)


def test_probe_table_marks_a_significantly_better_reference():
    def document(method, window, seed, hits, nll):
        run = {"dataset": "code", "pos_emb": method, "attention_window": window, "seed": seed, "train_length": T}
        return {"run": run, "path": f"{method}{window}{seed}", "results": [record(128, hits, nll)]}
    rng = np.random.default_rng(0)
    documents = [document("kerple_log", None, s, [1] * 8, 0.5 + rng.normal(0, 0.05, 8)) for s in (1, 2)]
    documents += [document("kerple_log", T, s, [0] * 4 + [1] * 4, 3.0 + rng.normal(0, 0.05, 8)) for s in (1, 2)]
    text = probe_tables(documents, "kv-retrieval")
    assert "| 128 | 1.00 ± 0.00 | 0.50 ± 0.00 |" in text
    nll_row = text.split("answer NLL")[1].splitlines()[-1]
    assert re.fullmatch(r"\| 128 \| 0\.\d{3} \| (2\.9|3\.0)\d+† \|", nll_row), nll_row


def test_sweep_variants_are_evaluation_only_runs(tmp_path):
    from tools.reproduce.runs import plan_runs
    from tools.reproduce.spec import SweepError, load_sweep
    sweep_file = tmp_path / "sweep.yml"
    body = """name: v
scale: test
profile: [configs/reproduce/mini.yml]
methods: [rotary, alibi]
seeds: [1]
datasets: [stdlib]
data: {stdlib: {builder: stdlib, prefix: data/stdlib/stdlib_text_document}}
evaluation: {eval-lengths: [64, 128]}
variants:
  rotary:
    - {rotary-scaling: {type: yarn, factor: 32}}
    - {rotary-scaling: {type: linear, factor: 2}}
"""
    sweep_file.write_text(body)
    sweep = load_sweep(sweep_file)
    runs = plan_runs(sweep, [sweep.data["stdlib"]])
    assert [str(r.label) for r in runs] == ["rotary", "rotary+yarn32", "rotary+linear2", "alibi"]
    yarn = runs[1]
    assert yarn.base is runs[0] and yarn.checkpoints == runs[0].checkpoints
    assert yarn.identity.config_hash == runs[0].identity.config_hash  # the same trained model
    assert yarn.evaluation_overrides()["rotary_scaling"]["type"] == "yarn"
    assert "rotary_scaling" not in yarn.training_overrides()
    sweep_file.write_text(body.replace("rotary-scaling: {type: linear, factor: 2}", "seq-length: 128"))
    with pytest.raises(SweepError, match=r"variants.rotary`: seq_length cannot vary at evaluation; a variant sets "
                                         r"only the method's per-run options \(rotary-scaling\)"):
        load_sweep(sweep_file)
    sweep_file.write_text(body.replace("  rotary:\n", "  t5:\n"))
    with pytest.raises(SweepError, match="variants.t5`: 't5' must be one of the grid's methods"):
        load_sweep(sweep_file)


def test_retrieval_section_tables_claim_and_heatmap(tmp_path):
    from types import SimpleNamespace
    from tools.reproduce.retrieval import retrieval_section

    def document(window, seed, hits, nll):
        run = {"dataset": "code", "pos_emb": "kerple_log", "attention_window": window, "seed": seed, "train_length": T}
        return {"run": run, "path": f"{window}{seed}", "results": [record(L, hits, nll) for L in (128, 512)]}
    documents = [document(None, s, [1] * 8, [0.5] * 4 + [0.4] * 4) for s in (1, 2)]
    documents += [document(T, s, [0] * 4 + [1] * 4, [3.0 + 0.1 * s] * 4 + [0.4] * 4) for s in (1, 2)]
    drawn = []
    sweep = SimpleNamespace(scale="hand-made", overrides={"probe_train_task": "kv-retrieval", "probe_train_kv_pairs": 1,
                                                          "train_iters": 10},
                            reference="kerple_log", claims={"reference": "kerple_log"})
    text = retrieval_section(sweep, documents, lambda fig, stem: drawn.append(stem))
    assert "(`probe-train-kv-pairs: 1`, `probe-train-task: kv-retrieval`)" in text  # the mix, as the sweep set it
    assert "| kerple_log | 1.00 | 1.00 | 16 |" in text and "| kerple_log+window64 | 1.00 | 0.00 | 16 |" in text
    assert "| **confirmed** |" in text and "prediction holds" in text
    assert drawn == ["kv-retrieval_code"] and "![kv-retrieval accuracy by length and depth on code]" in text
    # A study that judges no claims (no `claims:`) gets the tables and the heatmap, without claim 4.
    sweep.claims = None
    text = retrieval_section(sweep, documents, lambda fig, stem: drawn.append(stem))
    assert "| kerple_log+window64 | 1.00 | 0.00 | 16 |" in text and "accuracy by length and depth on code]" in text
    assert "| claim |" not in text and "Claim 4" not in text
