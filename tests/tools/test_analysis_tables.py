"""The Table 3/4 tool on hand-made result files whose t-test outcomes are known in advance."""
import csv
import io
import json
import math

import numpy as np
import pytest
from scipy import stats

from megatron.evaluation.results import ResultFileError, load_results
from tests.support.analysis import CHUNK_OFFSETS, write_run
from tools.analysis import make_tables
from tools.analysis.make_tables import build_table3, cell_text, render_csv, render_latex, render_markdown
from tools.analysis.training_speed import STEP_TIME_TAG, render_table4, speed_table

SEEDS = (1, 2, 3, 4, 5)
REFERENCE = np.array([1.00, 1.02, 0.98, 1.01, 0.99])  # kerple_log's loss per seed at L = 256
GAP = np.array([0.05, 0.06, 0.04, 0.05, 0.07])
NOISE = np.array([0.05, -0.04, 0.03, -0.02, 0.01])
LOSS_AT_256 = {"kerple_log": REFERENCE, "alibi": REFERENCE + GAP,  # reference clearly better: dagger
               "t5": REFERENCE + NOISE,                             # no significant difference
               "rotary": REFERENCE - GAP}                           # significant, but reference worse


@pytest.fixture
def seeds_dir(tmp_path):
    for method, per_seed in LOSS_AT_256.items():
        for seed, loss in zip(SEEDS, per_seed):
            write_run(tmp_path, "stdlib", method, seed, 64,
                      {64: 1.3 + CHUNK_OFFSETS + 0.01 * seed, 256: loss + CHUNK_OFFSETS})
    for seed in SEEDS:
        write_run(tmp_path, "stdlib", "learned", seed, 64, {64: 1.4 + CHUNK_OFFSETS}, skipped=(256,))
    return tmp_path


def test_daggers_follow_scipy_paired_t_test_over_seeds(seeds_dir):
    table = build_table3(load_results(seeds_dir))
    for method, losses in LOSS_AT_256.items():
        cell = table.cells["stdlib", method, 256]
        ppl = np.exp(losses)
        assert cell.ppl_mean == pytest.approx(ppl.mean()) and cell.ppl_std == pytest.approx(ppl.std(ddof=1))
        assert cell.seeds == 5
        if method == "kerple_log":
            assert cell.comparison is None
            continue
        expected = stats.ttest_rel(REFERENCE, losses)
        assert cell.comparison.over == "seeds" and cell.comparison.pairs == 5
        assert cell.comparison.p_value == pytest.approx(expected.pvalue, rel=1e-9)
        assert cell.comparison.dagger == (expected.pvalue < 0.05 and REFERENCE.mean() < losses.mean())
    assert table.cells["stdlib", "alibi", 256].comparison.dagger
    assert not table.cells["stdlib", "t5", 256].comparison.dagger
    rotary = table.cells["stdlib", "rotary", 256].comparison
    assert rotary.p_value < 0.05 and not rotary.dagger  # significant the other way: no dagger
    # A looser alpha flips t5's verdict only if its p-value is below it.
    p_t5 = stats.ttest_rel(REFERENCE, LOSS_AT_256["t5"]).pvalue
    assert build_table3(load_results(seeds_dir), alpha=0.99).cells["stdlib", "t5", 256].comparison.dagger == (
        p_t5 < 0.99 and REFERENCE.mean() < LOSS_AT_256["t5"].mean())


def test_one_seed_pairs_over_chunks(tmp_path):
    rng = np.random.default_rng(0)
    reference = rng.normal(2.0, 0.3, 40)
    worse = reference + rng.normal(0.02, 0.01, 40)
    same = reference + rng.normal(0.0, 0.05, 40)
    for method, losses in {"kerple_log": reference, "alibi": worse, "t5": same}.items():
        write_run(tmp_path, "prose", method, 1234, 64, {512: losses})
    table = build_table3(load_results(tmp_path))
    for method, losses in {"alibi": worse, "t5": same}.items():
        comparison = table.cells["prose", method, 512].comparison
        expected = stats.ttest_rel(reference, losses).pvalue
        assert comparison.over == "chunks" and comparison.pairs == 40
        assert comparison.p_value == pytest.approx(expected, rel=1e-9)
        assert comparison.dagger == (expected < 0.05 and reference.mean() < losses.mean())
    assert table.cells["prose", "alibi", 512].comparison.dagger
    assert table.cells["prose", "t5", 512].ppl_std is None and "±" not in cell_text(table.cells["prose", "t5", 512])


def test_chunk_pairing_refuses_runs_scored_on_different_chunks(tmp_path):
    write_run(tmp_path, "prose", "kerple_log", 1, 64, {128: np.ones(3)}, starts=[0, 128, 256])
    write_run(tmp_path, "prose", "alibi", 1, 64, {128: np.ones(3)}, starts=[0, 128, 384])
    with pytest.raises(ResultFileError, match="different chunks cannot be paired"):
        build_table3(load_results(tmp_path))


def test_one_run_in_two_files_is_one_run_and_two_runs_under_one_label_are_refused(tmp_path):
    write_run(tmp_path, "prose", "alibi", 1, 64, {64: np.ones(2)})
    (tmp_path / "copy.json").write_text((tmp_path / "prose_alibi_seed1.json").read_text())
    assert build_table3(load_results(tmp_path)).cells["prose", "alibi", 64].seeds == 1  # a copy is the same run
    other = json.loads((tmp_path / "copy.json").read_text())
    other["run"]["config_hash"] = "5bba9a12" + "0" * 56  # another training config, the same label
    (tmp_path / "copy.json").write_text(json.dumps(other))
    with pytest.raises(ResultFileError) as err:
        build_table3(load_results(tmp_path))
    assert str(err.value).startswith("two different runs are labelled 'alibi' (dataset prose, seed 1)")
    assert "--rename 5bba9a12=NEW" in str(err.value)


def test_renderings_place_daggers_na_and_paper_numbers(seeds_dir):
    table = build_table3(load_results(seeds_dir), paper_map={"stdlib": "GitHub"})
    markdown = render_markdown(table)
    header = next(line for line in markdown.splitlines() if line.startswith("| L |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    row = next(line for line in markdown.splitlines() if line.startswith("| 256 (4×)"))
    cells = dict(zip(columns, [c.strip() for c in row.strip("|").split("|")]))
    assert cells["alibi"].endswith("†") and "†" not in cells["t5"] + cells["rotary"] + cells["kerple_log"]
    assert cells["learned"] == "n/a"
    assert cells["kerple_log (paper, GitHub)"] == "2.86 ± 0.10"  # 4 x 512 = 2048 in the paper's table
    mean, std = np.exp(LOSS_AT_256["alibi"]).mean(), np.exp(LOSS_AT_256["alibi"]).std(ddof=1)
    assert cells["alibi"] == f"{mean:.2f} ± {std:.2f}†"
    assert "the KERPLE paper's own Table 3 numbers for GitHub" in markdown
    assert columns.index("kerple_log") < columns.index("alibi") < columns.index("t5") < columns.index("rotary")

    latex = render_latex(table)
    assert r"\multicolumn{" in latex and r"$^\dagger$" in latex and r"kerple\_log" in latex

    rows = list(csv.DictReader(io.StringIO(render_csv(table))))
    alibi = next(r for r in rows if r["method"] == "alibi" and r["length"] == "256")
    assert alibi["dagger"] == "True" and alibi["paired_over"] == "seeds"
    assert float(alibi["p_value"]) == pytest.approx(stats.ttest_rel(REFERENCE, LOSS_AT_256["alibi"]).pvalue)
    assert math.isclose(float(alibi["ppl_mean"]), mean)


def test_command_line_writes_all_formats(seeds_dir, tmp_path, capsys):
    out = tmp_path / "tables"
    make_tables.main([str(seeds_dir), "--out", str(out), "--paper"])
    assert sorted(p.name for p in out.iterdir()) == ["table3.csv", "table3.md", "table3.tex"]
    assert "| 256 (4×) |" in capsys.readouterr().out


def test_table4_reads_step_times_from_tensorboard(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    expected = {}
    for method, base in (("kerple_log", 0.30), ("alibi", 0.20)):
        for seed in (1, 2):
            writer = SummaryWriter(tmp_path / f"{method}-{seed}")
            times = [5.0] + [base + 0.01 * seed + 0.001 * i for i in range(5)]  # first point: start-up
            for step, value in enumerate(times):
                writer.add_scalar(STEP_TIME_TAG, value, (step + 1) * 10)
            writer.close()
            expected.setdefault(method, []).append(float(np.median(np.float32(times[1:]))))
    speeds = speed_table([f"{m}={tmp_path / f'{m}-{s}'}" for m in ("kerple_log", "alibi") for s in (1, 2)])
    assert speeds.keys() == expected.keys()
    for method in expected:
        np.testing.assert_allclose(speeds[method], expected[method], rtol=1e-6)
    text = render_table4(speeds, with_paper=True)
    assert text.index("kerple_log") < text.index("alibi") and "0.307" in text  # the paper's A100 number
    assert "0.307" not in render_table4(speeds) and r"\toprule" in render_table4(speeds, "tex")


def test_table4_without_step_times_is_a_clear_error(tmp_path):
    with pytest.raises(ResultFileError, match=f"found 0 '{STEP_TIME_TAG}' points"):
        speed_table([str(tmp_path)])


def test_methods_are_ordered_by_paper_order_then_window_and_variant_whatever_the_input_order():
    from megatron.evaluation.identity import Method
    from tools.analysis.results_index import method_sort_key
    expected = [Method("kerple_log"), Method("kerple_log", 64), Method("alibi"), Method("rotary"),
                Method("rotary", variant="dynamic_ntk32"), Method("rotary", variant="yarn4"),
                Method("rotary", variant="yarn32"), Method("fire")]
    for shuffled in (expected[::-1], expected[3:] + expected[:3]):
        assert sorted(shuffled, key=method_sort_key) == expected
