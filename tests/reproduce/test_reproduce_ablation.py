"""The ablation of issue 28: a sweep's `training_variants` are runs of their own (folder, config hash, label),
the report's copy of their result files carries the label, and ablation.py's pre-registered rules come out
each way; `chunk_subsets` re-read the same chunks of every run. In-process (the report, which asks git for the
commit: tests/e2e/reproduce/test_reproduce_ablation.py)."""
import json
import pathlib

import numpy as np
import pytest

from megatron.evaluation.results import load_result, write_atomic
from tests.support.ablation import FLAT, RISING, SLIGHTLY_WORSE, SWEEP, T, documents
from tools.reproduce import ablation
from tools.reproduce.ablation import DEGRADE_RATIO, Ablation


def kerple(*switches) -> Ablation:
    return Ablation("kerple_log", "alibi", switches)


def rows(levels, switches=("per-layer",)) -> dict:
    return {q: v for q, v, _ in ablation.verdicts(kerple(*switches), documents(levels))["code"]}


def test_a_rising_variant_reproduces_the_degradation_and_loses_to_alibi():
    assert np.exp(RISING(16 * T) - RISING(T)) > DEGRADE_RATIO
    verdict = rows({"kerple_log": FLAT, "kerple_log+per-layer": RISING, "alibi": lambda L: 2.05})
    assert verdict["1. kerple_log degrades"] == "does not degrade"
    assert verdict["1. kerple_log+per-layer degrades"] == "degrades"
    assert verdict["2. switch `per-layer`"] == "reproduces the degradation"
    assert verdict["3. kerple_log against ALiBi"] == "better"
    assert verdict["3. kerple_log+per-layer against ALiBi"].startswith("worse (ALiBi significantly better at L = [512")
    assert ablation.answer(kerple("per-layer"), {"code": ablation.verdicts(kerple("per-layer"), documents(
        {"kerple_log": FLAT, "kerple_log+per-layer": RISING}))["code"]}) == \
        "Reproduces the DAPE-V2 degradation: `per-layer` on code."


def test_worse_better_none_and_the_plain_answer():
    assert rows({"kerple_log": FLAT, "kerple_log+per-layer": SLIGHTLY_WORSE})["2. switch `per-layer`"] == \
        "makes KERPLE-log worse at L = [512, 1024] (not the DAPE-V2 degradation)"
    assert rows({"kerple_log": SLIGHTLY_WORSE, "kerple_log+per-layer": FLAT})["2. switch `per-layer`"] == \
        "makes KERPLE-log better at L = [512, 1024]"
    same = ablation.verdicts(kerple("bf16"), documents({"kerple_log": FLAT, "kerple_log+bf16": FLAT, "alibi": FLAT}))
    verdict = {q: v for q, v, _ in same["code"]}
    assert verdict["2. switch `bf16`"] == "no significant effect"
    assert verdict["3. kerple_log+bf16 against ALiBi"] == "not significantly different"
    assert ablation.answer(kerple("bf16"), same) == "No switch reproduces the degradation at this scale."


def test_a_reference_that_degrades_too_is_not_reproduced_by_the_switch():
    verdict = rows({"kerple_log": RISING, "kerple_log+per-layer": lambda L: RISING(L) + 0.1})
    assert verdict["1. kerple_log+per-layer degrades"] == "degrades"
    assert verdict["2. switch `per-layer`"].startswith("makes KERPLE-log worse")


def test_chunk_subsets_are_the_same_chunks_for_every_run_and_recomputed():
    docs = documents({"kerple_log": FLAT, "alibi": FLAT})
    small = ablation.subset(docs, 10)
    starts = {tuple(d["results"][2]["chunk_starts"]) for d in small}
    assert len(starts) == 1 and len(next(iter(starts))) == 10  # one subset, shared
    record, full = small[0]["results"][2], docs[0]["results"][2]
    assert record["chunks"] == 10 and set(record["chunk_starts"]) <= set(full["chunk_starts"])
    assert record["loss"] == pytest.approx(np.mean(record["chunk_losses"]))
    assert record["ppl"] == pytest.approx(np.exp(record["loss"]))
    assert full["chunks"] == 40  # the input is left as it was


def test_a_verdict_that_needs_many_chunks_flips_at_few():
    # per-layer worse by 0.02 nats at long lengths, each chunk's loss noisy by 0.03 of its own: the mean of
    # 40 chunks shows it (significant over the seeds), the mean of 5 does not.
    docs = documents({"kerple_log": FLAT, "kerple_log+per-layer": lambda L: 2.0 + (0.02 if L >= 8 * T else 0)},
                     run_noise=0.0, chunk_noise=0.03)
    by_count = ablation.chunk_verdicts(kerple("per-layer"), docs, [5], 40)
    assert {q: v for q, v, _ in by_count[40]["code"]}["2. switch `per-layer`"].startswith("makes KERPLE-log worse")
    flips = ablation.flips(by_count, 40)
    assert set(flips) == {5}
    assert all(d == "code" and v != w for d, q, v, w in flips[5])


# ---------------------------------------------------------------------------------------- the sweep
def load(tmp_path, text=SWEEP, **paths):
    from tools.reproduce.spec import load_sweep
    path = tmp_path / "sweep.yml"
    path.write_text(text + "".join(f"{k}: {v}\n" for k, v in paths.items()))
    return load_sweep(path)


def test_training_variants_are_runs_of_their_own(tmp_path):
    from tools.reproduce.runs import plan_runs
    sweep = load(tmp_path)
    runs = plan_runs(sweep, [sweep.data["stdlib"]])
    assert [str(r.label) for r in runs[:4]] == ["kerple_log", "kerple_log+per-layer", "kerple_log+per-layer+bf16",
                                                "alibi"]
    plain, layered, both = runs[:3]
    assert layered.base is None and layered.directory.parts[-2] == "kerple_log+per-layer"
    assert layered.training_overrides()["pos_emb_per_layer"] is True and "pos_emb_per_layer" not in plain.training_overrides()
    assert both.args().precision == "bf16" and plain.args().precision == "fp32"
    assert len({r.identity.config_hash for r in (plain, layered, both)}) == 3
    assert str(layered.written_label) == "kerple_log"  # what evaluate.py writes; the report relabels
    assert sweep.chunk_subsets == [5]


@pytest.mark.parametrize("change,message", [
    ("  t5:\n    x: {precision: bf16}\n", "training_variants.t5`: 't5' must be one of the grid's methods"),
    ("  kerple_log:\n    bad: {no-such-key: 1}\n", "no-such-key is not a config key"),
    ("  kerple_log:\n    bad: {pos-emb: alibi}\n", "pos-emb and seed are the grid's own axes"),
    ("  kerple_log:\n    'a b': {precision: bf16}\n", "letters, digits"),
    # Issue 40 row 12: keys the sweep sets for every run were silently replaced; now refused with the reason.
    ("  kerple_log:\n    bad: {save: /tmp/elsewhere}\n", "save: the sweep sets these for every run"),
    ("  kerple_log:\n    bad: {eval-results-dir: r, log-dir: l}\n", "eval-results-dir, log-dir: the sweep sets"),
])
def test_a_bad_training_variant_is_one_clear_error(tmp_path, change, message):
    from tools.reproduce.spec import SweepError
    start = SWEEP.index("  kerple_log:\n    per-layer")
    end = SWEEP.index("seeds:")
    with pytest.raises(SweepError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load(tmp_path, SWEEP[:start] + change + SWEEP[end:])


def test_chunk_subsets_must_be_below_the_scored_count(tmp_path):
    from tools.reproduce.spec import SweepError
    with pytest.raises(SweepError, match="chunk_subsets"):
        load(tmp_path, SWEEP.replace("chunk_subsets: [5]", "chunk_subsets: [40]"))


def test_the_reports_copy_of_a_variants_result_carries_its_label(tmp_path):
    from tools.reproduce.inputs import ReportInputs, labelled, save
    from tools.reproduce.runs import plan_runs
    sweep = load(tmp_path, report_dir=str(tmp_path / "report"))
    layered = plan_runs(sweep, [sweep.data["stdlib"]])[1]
    written = documents({"kerple_log": FLAT})[0]
    path = tmp_path / "eval" / "stdlib_kerple_log_seed1_step10_0123abcd.json"
    write_atomic(path, {k: v for k, v in {**written, "run": {**written["run"], "name": path.stem,
                                                              "dataset": "stdlib"}}.items() if k != "path"})
    document = labelled(load_result(path), layered)
    assert document["run"]["method"] == "kerple_log+per-layer" and document["run"]["variant"] == "per-layer"
    assert document["run"]["training_variant"] == {"label": "per-layer", "keys": {"pos_emb_per_layer": True}}
    save(ReportInputs([document], {}, {}, []), sweep)
    copy = tmp_path / "report" / "inputs" / "results" / "stdlib_kerple_log+per-layer_seed1_step10_0123abcd.json"
    assert load_result(copy)["run"]["method"] == "kerple_log+per-layer"
    assert json.loads(path.read_text())["run"]["method"] == "kerple_log"  # evaluate.py's own file is untouched


def test_one_seed_gives_no_test_rather_than_an_error():
    docs = [d for d in documents({"kerple_log": FLAT, "kerple_log+per-layer": FLAT}) if d["run"]["seed"] == 1]
    verdict = {q: (v, e) for q, v, e in ablation.verdicts(kerple("per-layer"), docs)["code"]}
    assert verdict["1. kerple_log degrades"][0] == "does not degrade"
    assert "(no test: one seed)" in verdict["1. kerple_log degrades"][1]
    assert verdict["2. switch `per-layer`"][0] == "no significant effect"


def test_a_training_variant_with_a_switch_is_found_by_the_label_evaluate_py_writes(tmp_path):
    """A layer-pattern variant: evaluate.py labels its result `rotary+layers-<hash>` (identity.py), and the
    sweep looks for exactly that, while its folder and report label stay `rotary+nope-alternate`."""
    from megatron.evaluation.identity import evaluation_variant
    from tools.reproduce.runs import plan_runs
    from tools.reproduce.spec import load_sweep
    sweep = load_sweep(pathlib.Path(__file__).parents[2] / "configs/reproduce/cpu-mini-2026.yml")
    (hybrid,) = [r for r in plan_runs(sweep, [sweep.data["stdlib"]]) if r.trained == "nope-alternate" and r.seed == 1235]
    assert str(hybrid.label) == "rotary+nope-alternate" and hybrid.directory.parts[-2] == "rotary+nope-alternate"
    written = evaluation_variant(hybrid.args())  # as evaluate.py computes it from the run's config
    assert written.startswith("layers-") and str(hybrid.written_label) == f"rotary+{written}"


# ------------------------------------------------------------------ any method, against any anchor
ROTARY = Ablation("rotary", "t5", ("big-base",))


def test_another_method_against_another_anchor_is_judged_by_the_same_rules_in_its_own_words():
    """rotary with a switch, against T5: the verdicts name those two, and no other paper's numbers are cited
    (theirs.py has none for rotary)."""
    docs = documents({"rotary": FLAT, "rotary+big-base": RISING, "t5": lambda L: 2.05})
    verdict = {q: v for q, v, _ in ablation.verdicts(ROTARY, docs)["code"]}
    assert verdict["1. rotary degrades"] == "does not degrade"
    assert verdict["1. rotary+big-base degrades"] == "degrades"
    assert verdict["1. t5 degrades"] == "does not degrade"
    assert verdict["2. switch `big-base`"] == "reproduces the degradation"
    assert verdict["3. rotary against T5"] == "better"
    assert verdict["3. rotary+big-base against T5"].startswith("worse (T5 significantly better at L = [512")
    assert ablation.answer(ROTARY, ablation.verdicts(ROTARY, docs)) == "Reproduces the degradation: `big-base` on code."
    worse = {q: v for q, v, _ in ablation.verdicts(ROTARY, documents(
        {"rotary": FLAT, "rotary+big-base": SLIGHTLY_WORSE}))["code"]}
    assert worse["2. switch `big-base`"] == "makes rotary worse at L = [512, 1024]"
    rules = ablation.rules_text(ROTARY, 20)
    assert "**3. Against T5**" in rules and "a training variant of rotary, against rotary)" in rules
    assert "DAPE-V2" not in rules + ablation.retrieval_rules_text(ROTARY)
    assert "DAPE-V2's KERPLE-log: 1.49 at 8x, 1.99 at 16x" in ablation.rules_text(kerple(), 20)  # theirs.py's numbers


def test_an_ablation_of_another_method_loads_and_its_section_cites_no_other_paper(tmp_path):
    from tools.analysis.plot_common import save_figure
    from tools.reproduce.ablation_report import ablation_section
    text = (SWEEP.replace("methods: [kerple_log, alibi]", "methods: [rotary, t5]")
            .replace("  kerple_log:\n    per-layer: {pos-emb-per-layer: true}\n    per-layer+bf16: {pos-emb-per-layer: true, "
                     "precision: bf16}\n", "  rotary:\n    big-base: {rotary-emb-base: 500000}\n")
            .replace("ablation: {method: kerple_log, anchor: alibi}", "ablation: {method: rotary, anchor: t5}"))
    sweep = load(tmp_path, text)
    assert sweep.ablation == {"method": "rotary", "anchor": "t5", "measure": "perplexity"}
    docs = documents({"rotary": FLAT, "rotary+big-base": RISING, "t5": FLAT})
    drawn = []
    section = ablation_section(sweep, docs, lambda fig, stem: drawn.append(save_figure(fig, tmp_path / stem)))
    assert section.startswith("## The ablation: which switch makes rotary degrade?")
    assert "**Answer (40 chunks per length): Reproduces the degradation: `big-base` on code.**" in section
    assert "the reference is `rotary`, the anchor T5. The rules" in section
    assert "| 2. switch `big-base` | **reproduces the degradation** |" in section
    assert "DAPE-V2" not in section and "CABLE" not in section and "theirs" not in section
    assert "read from 5 and 40 chunks](ablation_chunks.png)" in section
    assert (tmp_path / "ablation_ppl.png").is_file() and (tmp_path / "ablation_chunks.png").is_file()
