"""Which test the seeds call for (tools/analysis/significance.py), its p-value against scipy.stats computed
here on small known arrays, marks in both directions, and the effective length's censoring and its
reference, which a display filter must not move."""
import json

import numpy as np
import pytest
from scipy import stats
from tests.support.analysis import CHUNK_OFFSETS, write_run

from megatron.evaluation.identity import Method
from megatron.evaluation.results import load_results
from tools.analysis import make_tables
from tools.analysis.effective_length import Curve, cell_text, estimate
from tools.analysis.make_tables import build_table3, render_csv, render_latex, render_markdown
from tools.analysis.ruler_table import SCHEMA as RULER_SCHEMA
from tools.analysis.ruler_table import ruler_tables
from tools.analysis.significance import (ONE_AGAINST_SPREAD, PAIRED_CHUNKS, PAIRED_SEEDS, WELCH_SEEDS,
                                         across_seeds)

# Per-seed losses at L = 128 (every chunk of a seed is its loss + CHUNK_OFFSETS, mean 0).
KERPLE = {1: 2.00, 2: 2.22, 3: 2.10, 4: 1.95}   # four seeds, spread ~0.12 in loss
ALIBI = {1: 2.11}                                 # one seed, 0.05 above KERPLE's mean: inside its spread
T5 = {5: 2.40, 6: 2.45, 7: 2.38}                  # three other seeds, clearly worse
ROPE = {1: 1.80, 2: 2.01, 3: 1.90, 4: 1.76}       # KERPLE's seeds, each ~0.2 lower: reference worse


def _offsets(method, seed):
    """Each run's chunks spread a little differently around its loss (their mean stays 0)."""
    return CHUNK_OFFSETS * (1 + seed / 10 + len(method) / 100)


def _folder(tmp_path, runs):
    for method, per_seed in runs.items():
        for seed, loss in per_seed.items():
            write_run(tmp_path, "stdlib", method, seed, 64, {128: loss + _offsets(method, seed)})
    return tmp_path


def test_seed_counts_choose_the_test_and_its_p_value_is_scipys(tmp_path):
    table = build_table3(load_results(_folder(tmp_path, {"kerple_log": KERPLE, "alibi": ALIBI, "t5": T5,
                                                         "rotary": ROPE})))
    ref = np.array(list(KERPLE.values()))

    t5 = table.cells["stdlib", "t5", 128].comparison  # 4 against 3, no seed shared: Welch over seeds
    assert t5.test == WELCH_SEEDS and t5.over == "seeds" and t5.pairs is None
    assert t5.p_value == pytest.approx(stats.ttest_ind(ref, list(T5.values()), equal_var=False).pvalue, rel=1e-9)
    assert t5.dagger and not t5.reference_worse

    rope = table.cells["stdlib", "rotary", 128].comparison  # the same four seeds: paired over seeds
    assert rope.test == PAIRED_SEEDS and rope.pairs == 4
    assert rope.p_value == pytest.approx(stats.ttest_rel(ref, list(ROPE.values())).pvalue, rel=1e-9)
    assert rope.p_value < 0.05 and rope.reference_worse and not rope.dagger

    alibi = table.cells["stdlib", "alibi", 128].comparison  # 4 against 1: the single run against the spread
    assert alibi.test == ONE_AGAINST_SPREAD and alibi.seeds == (4, 1)
    # Crawford & Howell: t = (mean - x) / (s sqrt(1 + 1/n)), n - 1 degrees of freedom; scipy's pooled t-test
    t = (ref.mean() - ALIBI[1]) / (ref.std(ddof=1) * np.sqrt(1 + 1 / len(ref)))
    assert alibi.p_value == pytest.approx(2 * stats.t.sf(abs(t), len(ref) - 1), rel=1e-9)
    assert alibi.p_value == pytest.approx(stats.ttest_ind(ref, [ALIBI[1]]).pvalue, rel=1e-9)
    assert alibi.p_value > 0.05 and alibi.mark == ""
    # the chunk-level test over the one seed both have would claim a difference; it is not used
    chunks = stats.ttest_rel(KERPLE[1] + _offsets("kerple_log", 1), ALIBI[1] + _offsets("alibi", 1))
    assert chunks.pvalue < 0.05

    markdown = render_markdown(table)
    row = next(line for line in markdown.splitlines() if line.startswith("| 128 (2×)"))
    columns = [c.strip() for c in next(line for line in markdown.splitlines() if line.startswith("| L |"))
               .strip("|").split("|")]
    cells = dict(zip(columns, [c.strip() for c in row.strip("|").split("|")]))
    assert cells["t5"].endswith("†") and cells["rotary"].endswith("‡") and cells["alibi"][-1].isdigit()
    assert ("† / ‡: kerple_log significantly better / worse (two-sided, α = 0.05; paired t-test over seeds; "
            "Welch's t-test over seeds; t-test of a one-seed run against the other's seed spread — compared: "
            "4 seeds against 1, the one-seed run taken to vary across seeds as the other does).") in markdown
    assert r"$^\ddagger$" in render_latex(table) and r"$^\dagger$" in render_latex(table)
    rows = {r["method"]: r for r in __import__("csv").DictReader(__import__("io").StringIO(render_csv(table)))
            if r["length"] == "128"}
    assert rows["rotary"]["reference_worse"] == "True" and rows["rotary"]["dagger"] == "False"
    assert rows["alibi"]["test"] == ONE_AGAINST_SPREAD


@pytest.mark.filterwarnings("ignore:Precision loss occurred")  # scipy, on the equal values given on purpose
def test_across_seeds_is_none_for_one_seed_each_and_nan_marks_nothing(tmp_path):
    assert across_seeds({1: 2.0}, {2: 2.1}) is None
    test, p, pairs = across_seeds({1: 2.0, 2: 2.0}, {1: 2.0, 2: 2.0})  # no spread: scipy's NaN
    assert test == PAIRED_SEEDS and np.isnan(p)
    table = build_table3(load_results(_folder(tmp_path, {"kerple_log": {1: 2.0, 2: 2.0}, "alibi": {1: 2.0, 2: 2.0}})))
    assert table.cells["stdlib", "alibi", 128].comparison.mark == ""


def test_one_seed_each_is_paired_over_chunks_and_says_what_it_measures(tmp_path):
    rng = np.random.default_rng(0)
    reference, other = rng.normal(2.0, 0.3, 30), None
    other = reference - 0.05 + rng.normal(0, 0.01, 30)  # reference worse by 0.05 on every chunk
    write_run(tmp_path, "stdlib", "kerple_log", 1, 64, {128: reference})
    write_run(tmp_path, "stdlib", "alibi", 1, 64, {128: other})
    table = build_table3(load_results(tmp_path))
    comparison = table.cells["stdlib", "alibi", 128].comparison
    assert comparison.test == PAIRED_CHUNKS and comparison.pairs == 30
    assert comparison.p_value == pytest.approx(stats.ttest_rel(reference, other).pvalue, rel=1e-9)
    assert comparison.reference_worse and comparison.mark == "‡"
    assert "paired t-test over chunks, one seed each: evaluation noise only" in render_markdown(table)


def _ruler_document(folder, method, seed, scores_by_length):
    document = {"schema": RULER_SCHEMA,
                "run": {"name": f"stdlib_{method}_seed{seed}", "method": method, "pos_emb": method, "seed": seed,
                        "dataset": "stdlib", "train_length": 64, "checkpoint_step": 100},
                "ruler": {"niah_single_1": {str(n): {"score": float(np.mean(s)), "scores": list(s),
                                                     "doc_ids": list(range(len(s))), "ci95": [0.0, 1.0], "n": len(s)}
                                            for n, s in scores_by_length.items()}}}
    (folder / "lm_eval").mkdir(exist_ok=True)
    (folder / "lm_eval" / f"stdlib_{method}_seed{seed}.json").write_text(json.dumps(document))


def test_ruler_marks_both_directions_across_seeds():
    def doc(method, seed, share):
        scores = [1.0] * round(20 * share) + [0.0] * (20 - round(20 * share))
        return {"run": {"method": method, "pos_emb": method, "seed": seed, "train_length": 64},
                "ruler": {"niah_single_1": {"512": {"score": share, "scores": scores, "doc_ids": list(range(20)),
                                                    "ci95": [0, 1], "n": 20}}}}
    kerple = {1: 0.50, 2: 0.55, 3: 0.60}
    documents = ([doc("kerple_log", s, v) for s, v in kerple.items()]
                 + [doc("alibi", s, v) for s, v in {1: 0.80, 2: 0.90, 3: 0.85}.items()]
                 + [doc("t5", s, v) for s, v in {4: 0.10, 5: 0.15}.items()])
    text = ruler_tables(documents)
    row = next(line for line in text.splitlines() if line.startswith("| 512"))
    assert "0.850‡" in row and "0.125†" in row
    assert "kerple_log significantly higher / lower" in text and "Welch's t-test over seeds" in text
    assert "paired t-test over seeds" in text  # alibi: the same three seeds
    assert stats.ttest_rel(list(kerple.values()), [0.80, 0.90, 0.85]).pvalue < 0.05  # the ‡ above is this test's
    assert stats.ttest_ind(list(kerple.values()), [0.10, 0.15], equal_var=False).pvalue < 0.05  # and the † this one's


def test_effective_length_is_censored_at_the_longest_length_measured():
    values = {n: {1: np.full(4, loss)} for n, loss in {64: 2.0, 128: 2.05, 256: 2.1, 512: 2.12}.items()}
    e = estimate(Curve("ppl (nonoverlap)", Method("kerple_log", None, None), True, values, 64), 0.85, 1.2, draws=50)
    assert e["effective"] == 512 == e["longest"]
    assert cell_text({**e, "train_length": 64}) == "≥ 512 (≥ 8×) [≥ 512, ≥ 512]"
    values[512] = {1: np.full(4, 2.5)}  # exp(0.5) = 1.65x the reference: fails
    e = estimate(Curve("ppl (nonoverlap)", Method("kerple_log", None, None), True, values, 64), 0.85, 1.2, draws=50)
    assert cell_text({**e, "train_length": 64}) == "256 (4×) [256, 256]"


def test_length_filter_moves_neither_the_reference_nor_the_walk(tmp_path, capsys):
    # ppl 7.39 at 64; 128 and 256 within 1.2x; 512 not (1.35x); 1024 within again: effective length 256
    write_run(tmp_path, "stdlib", "rotary", 1, 64, {n: np.full(4, loss) for n, loss in
                                                     {64: 2.0, 128: 2.1, 256: 2.15, 512: 2.3, 1024: 2.1}.items()})
    _ruler_document(tmp_path, "rotary", 1, {512: [1.0, 0.0], 1024: [0.0, 0.0]})

    def effective_row(*extra):
        make_tables.main([str(tmp_path), *extra])
        out = capsys.readouterr().out
        return next(line for line in out.splitlines() if line.startswith("| ppl (nonoverlap) |"))

    full = effective_row()
    assert full == "| ppl (nonoverlap) | 256 (4×) [256, 256] |"
    assert effective_row("--length", "128", "256", "1024") == full  # 512, which fails, not shown
    assert effective_row("--length", "128", "256", "512") == full   # the training length not shown
