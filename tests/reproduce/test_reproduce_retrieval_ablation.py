"""The sweep's `ablation:` key (a sweep's training variants are judged as an ablation's switches only when
it says so) and the retrieval ablation's pre-registered rules (ablation.retrieval_rules_text) on
hand-made probe records whose McNemar p-values are worked out by hand: 2 x 0.5^n when n discordant pairs
all go one way. In-process (the report, whose header asks git for the commit:
tests/e2e/reproduce/test_reproduce_retrieval_ablation.py)."""
import math

import pytest

from tests.support.retrieval_ablation import SAMPLES, SWEEP, at, documents, first
from tools.analysis.significance import mcnemar
from tools.reproduce import ablation
from tools.reproduce.ablation import Ablation


def kerple(*switches) -> Ablation:
    return Ablation("kerple_log", "alibi", switches)


def verdicts(hits, switches=("per-layer", "bf16", "per-layer+bf16")) -> dict:
    return {q: (v, e) for q, v, e in ablation.retrieval_verdicts(kerple(*switches), documents(hits))["code"]}


def test_mcnemar_is_the_exact_binomial_test_on_the_discordant_pairs():
    assert mcnemar([1, 1, 1, 0], [0, 0, 0, 0]) == (0.25, 3, 0)         # 2 x 0.5^3
    p, only_a, only_b = mcnemar([1] * 6 + [0, 1], [0] * 6 + [1, 1])   # 6 one way, 1 the other
    assert (only_a, only_b) == (6, 1) and p == pytest.approx(2 * (1 + 7) / 2 ** 7)  # 0.125
    assert mcnemar([1, 0], [1, 0]) == (None, 0, 0)                      # no discordant pair: no test


def test_r1_loses_retrieval_needs_the_ratio_and_the_test():
    v = verdicts({"kerple_log": at(first(40), lambda L: first(34) if L == 512 else first(30))})
    verdict, numbers = v["R1. kerple_log loses retrieval"]
    # 512: 0.85x (above 0.8) though 18 pairs all went to T (p = 2 x 0.5^18); 1024: 0.75x, 30 pairs (p = 2 x 0.5^30).
    assert verdict == "loses retrieval at L = [1024]"
    assert f"L=512: 0.85 (0.85x; p = {2 * 0.5 ** 18:.2g})" in numbers
    assert f"L=1024: 0.75 (0.75x; p = {2 * 0.5 ** 30:.2g})" in numbers


def test_r1_a_drop_to_the_ratio_without_significance_keeps_retrieval():
    # One seed's worth of pairs per seed: at T samples 0-19 right (0.5), at long L samples 15-30 (0.4 = 0.8x):
    # 15 pairs only at T and 11 only at L per seed, 45 vs 33 over 3 seeds: p = 2 P(X <= 33 | n = 78) = 0.21.
    late = [0] * 15 + [1] * 16 + [0] * 9
    v = verdicts({"kerple_log": at(first(20), lambda L: late)})
    p = 2 * sum(math.comb(78, k) for k in range(34)) / 2 ** 78
    assert 0.05 < p < 0.5
    assert v["R1. kerple_log loses retrieval"][0] == "keeps retrieval"
    assert f"L=512: 0.40 (0.80x; p = {p:.2g})" in v["R1. kerple_log loses retrieval"][1]


def test_r2_each_verdict_and_the_answer():
    ref = at(first(40), lambda L: first(30))
    hits = {"kerple_log": ref,
            "kerple_log+per-layer": at(first(40), lambda L: first(10)),                                  # worse at both
            "kerple_log+bf16": at(first(40), lambda L: first(10) if L == 512 else first(30)),            # worse at 512
            "kerple_log+per-layer+bf16": at(first(40), lambda L: first(40) if L == 512 else first(30)),  # better at 512
            "kerple_log+mixed": at(first(40), lambda L: first(40) if L == 512 else first(10))}
    v = verdicts(hits, ["per-layer", "bf16", "per-layer+bf16", "mixed"])
    assert v["R2. switch `per-layer`"][0] == "makes retrieval worse at every long length"
    assert f"L=512: 0.25 vs 0.75 (p = {2 * 0.5 ** 60:.2g})" in v["R2. switch `per-layer`"][1]  # 20 pairs x 3 seeds
    assert v["R2. switch `bf16`"][0] == "makes retrieval worse at L = [512] only"
    assert "L=1024: 0.75 vs 0.75 (no test)" in v["R2. switch `bf16`"][1]
    assert v["R2. switch `per-layer+bf16`"][0] == "makes retrieval better at L = [512]"
    assert v["R2. switch `mixed`"][0] == "mixed"
    by_dataset = ablation.retrieval_verdicts(kerple("per-layer", "bf16"), documents(hits))
    assert ablation.retrieval_answer(kerple("per-layer", "bf16"), by_dataset) == \
        "Makes KERPLE-log's retrieval worse at every long length: `per-layer` on code."


def test_r2_six_to_one_is_no_significant_effect():
    ref = at(first(40), lambda L: first(30))

    def variant(L, seed):  # 2 pairs only the reference gets per seed; seed 3 also 1 pair only the variant gets
        if L < 512:
            return first(40)
        hits = first(28)
        return hits[:39] + [1] if seed == 3 else hits
    v = verdicts({"kerple_log": ref, "kerple_log+per-layer": variant}, ["per-layer"])
    assert v["R2. switch `per-layer`"][0] == "no significant effect"
    assert f"(p = {2 * (1 + 7) / 2 ** 7:.2g})" in v["R2. switch `per-layer`"][1]   # 2 x (C(7,0) + C(7,1)) / 2^7 = 0.125


def test_r3_against_alibi_and_a_model_that_did_not_learn():
    hits = {"kerple_log": at(first(40), lambda L: first(30)), "alibi": at(first(40), lambda L: first(20)),
            "kerple_log+per-layer": at(first(40), lambda L: first(10)), "kerple_log+bf16": at(first(2), lambda L: first(0))}
    v = verdicts(hits, ["per-layer", "bf16"])
    assert v["R3. kerple_log against ALiBi"][0] == "better"
    assert v["R3. kerple_log+per-layer against ALiBi"][0] == "worse (ALiBi significantly more accurate at L = [512, 1024])"
    assert v["R1. kerple_log+bf16 loses retrieval"][0] == "did not learn the task"   # 2 of 40 = 5% at T
    assert v["R2. switch `bf16`"][0] == "not compared"
    assert "R3. kerple_log+bf16 against ALiBi" not in v


def test_probes_that_differ_between_runs_are_refused():
    docs = documents({"kerple_log": at(first(40), lambda L: first(30)), "kerple_log+per-layer": at(first(40), lambda L: first(30))})
    docs[-1]["results"][2]["probe_keys"] = list(range(SAMPLES))
    with pytest.raises(ValueError, match="the probes at length 512 differ"):
        ablation.retrieval_verdicts(kerple("per-layer"), docs)


# ------------------------------------------------------------------------------------ the `ablation:` key
def load(tmp_path, text):
    from tools.reproduce.spec import load_sweep
    path = tmp_path / "sweep.yml"
    path.write_text(text)
    return load_sweep(path)


def test_the_ablation_key_is_optional_and_measure_defaults_to_perplexity(tmp_path):
    assert load(tmp_path, SWEEP).ablation is None
    assert load(tmp_path, SWEEP + "ablation: {method: kerple_log, anchor: alibi}\n").ablation == \
        {"method": "kerple_log", "anchor": "alibi", "measure": "perplexity"}
    assert load(tmp_path, SWEEP + "ablation: {method: kerple_log, anchor: alibi, measure: kv-retrieval}\n"
                ).ablation["measure"] == "kv-retrieval"


@pytest.mark.parametrize("text,message", [
    (SWEEP + "ablation: [kerple_log, alibi]\n", "`ablation`: must be a mapping with keys method, anchor and (optional) measure"),
    (SWEEP + "ablation: {method: kerple_log, anchor: alibi, reference: t5}\n", "must be a mapping with keys"),
    (SWEEP + "ablation: {method: alibi, anchor: kerple_log}\n", "`ablation.method`: 'alibi' has no training_variants"),
    (SWEEP + "ablation: {method: kerple_log}\n", "`ablation`: names no anchor: give the method"),
    (SWEEP + "ablation: {method: kerple_log, anchor: kerple_log}\n", "`ablation.anchor`: 'kerple_log' is the ablation's method"),
    (SWEEP.replace("methods: [kerple_log, alibi]", "methods: [kerple_log]") + "ablation: {method: kerple_log, anchor: alibi}\n",
     "`ablation.anchor`: 'alibi' must be one of the grid's methods (kerple_log)"),
    (SWEEP.replace("    per-layer: {pos-emb-per-layer: true}\n", "").replace("training_variants:\n  kerple_log:\n", "")
     + "ablation: {method: kerple_log, anchor: alibi}\n", "`ablation.method`: 'kerple_log' has no training_variants"),
    (SWEEP + "ablation: {method: kerple_log, anchor: alibi, measure: accuracy}\n",
     "`ablation.measure`: 'accuracy': choose perplexity or kv-retrieval"),
    (SWEEP.replace("[nonoverlap, kv-retrieval]", "[nonoverlap]") + "ablation: {method: kerple_log, anchor: alibi, measure: kv-retrieval}\n",
     "kv-retrieval is read from the kv-retrieval records: add kv-retrieval to evaluation.eval-modes"),
])
def test_a_bad_ablation_key_is_one_clear_error(tmp_path, text, message):
    from tools.reproduce.spec import SweepError
    with pytest.raises(SweepError, match=message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        load(tmp_path, text)
