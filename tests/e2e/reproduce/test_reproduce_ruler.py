"""The reproduction sweep with RULER among its measures (`ruler:` in the sweep YAML): eval.py runs the tasks on
every run, the report shows the RULER table and the effective lengths, and a re-run skips the finished work
(bad `ruler` entries and the plan's line: tests/reproduce/test_reproduce_ruler.py)."""
import json
import subprocess

import yaml

from tests.support.reproduce import reproduce as reproduce_in, reproduce_here, ruler_sweep_file as ruler_sweep


def reproduce(*argv) -> subprocess.CompletedProcess:
    """With room for eval.py's generations on a busy machine."""
    return reproduce_in(*argv, timeout=1200)


def test_sweep_runs_ruler_and_reports_effective_lengths(tmp_path):
    """One run trained and evaluated first without `ruler`; RULER added to the finished run runs eval.py only (not
    train.py or evaluate.py again), the report shows it, a re-run launches nothing and --report-only renders it from
    the inputs beside the report (these two launch nothing: main() in this process). (A fresh run with `ruler` takes the same steps in one invocation: training,
    evaluate.py, then eval.py, each skipped when done; eval.py itself on a fresh checkpoint:
    tests/e2e/evaluation/test_ruler.py.)"""
    sweep = ruler_sweep(tmp_path, {"tasks": ["niah_single_1"], "limit": 2})
    spec = yaml.safe_load(sweep.read_text())
    ruler = spec.pop("ruler")
    sweep.write_text(yaml.safe_dump(spec))
    first = reproduce(sweep)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "RULER" not in (tmp_path / "report/report.md").read_text()
    sweep.write_text(yaml.safe_dump({**spec, "ruler": ruler}))

    # RULER added to (or missing from) a finished run: only eval.py runs, not training or evaluate.py
    added = reproduce(sweep)
    assert added.returncode == 0, added.stdout + added.stderr
    logs = {name: (tmp_path / "work/code/kerple_log/seed7" / name).read_text().count("\n$ ")
            for name in ("train.log", "evaluate.log", "ruler.log")}
    assert logs == {"train.log": 1, "evaluate.log": 1, "ruler.log": 1}
    written = {}
    for path in (tmp_path / "work/code").glob("*/seed7/eval/lm_eval/*.json"):
        document = json.loads(path.read_text())
        written[document["run"]["method"]] = document
    assert sorted(written) == ["kerple_log"]
    for document in written.values():
        assert document["evaluation"]["limit"] == 2 and document["evaluation"]["ruler"]["lengths"] == [64, 512]
        assert document["ruler"]["niah_single_1"]["64"]["score"] is None
        assert document["ruler"]["niah_single_1"]["512"]["n"] == 2
    report = (tmp_path / "report/report.md").read_text()
    assert "## RULER and the effective length of every method" in report
    assert "RULER niah_single_1: score" in report and "| 64 (1×) | no sample fits |" in report
    assert "Effective length by method" in report and "| ppl (nonoverlap) |" in report
    assert "| niah_single_1 |" in report
    for stem in ("ruler_code", "effective_length_code"):  # each table beside its figure
        assert f"({stem}.png)" in report and (tmp_path / f"report/{stem}.png").stat().st_size > 0
    saved = sorted(p.name.split("_seed")[0] for p in (tmp_path / "report/inputs/lm_eval").glob("*.json"))
    assert saved == ["code_kerple_log"]

    second = reproduce_here(sweep)  # finished: neither evaluate.py nor eval.py runs again
    assert second.returncode == 0, second.stdout + second.stderr
    assert "code/kerple_log/seed7: already finished" in second.stdout
    assert (tmp_path / "work/code/kerple_log/seed7/ruler.log").read_text().count("\n$ ") == 1
    (tmp_path / "report/report.md").unlink()
    rerendered = reproduce_here(sweep, "--report-only")  # from the inputs beside the report
    assert rerendered.returncode == 0, rerendered.stdout + rerendered.stderr
    assert "| niah_single_1 |" in (tmp_path / "report/report.md").read_text()
