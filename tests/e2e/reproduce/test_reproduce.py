"""tools/reproduce end to end on a few-step grid: real data preparation, deepy.py training and
evaluation, the report with its tables and figures, a re-run that skips the finished work, and (slow)
a failed run reported while the rest go on (a bad sweep YAML: tests/reproduce/test_reproduce_plan.py)."""
import csv
import json
import shutil

import pytest
import yaml

from tests.support.reproduce import REPO_ROOT, reproduce, reproduce_here, sweep_file


def test_sweep_end_to_end_then_resume(tmp_path, capsys, monkeypatch):
    """The command trains and evaluates; its re-run, --report-only and the refusal of a changed config launch
    nothing, so they call the same main() in this process (tests/support/reproduce.py: reproduce_here)."""
    sweep = sweep_file(tmp_path)
    first = reproduce(sweep)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[2/2] code/kerple_log+window64/seed7" in first.stdout and "ETA" in first.stdout

    report_dir = tmp_path / "report"
    report = (report_dir / "report.md").read_text()
    assert "Scale: test grid: 0.1M parameters, 6 steps" in report
    assert "python -m tools.reproduce" in report and "Commit: `" in report
    assert "2 of 2 planned runs have results" in report
    assert "kerple_log (paper, GitHub)" in report  # the paper's numbers beside ours, labelled
    for figure in ("ppl_vs_length", "position_code", "kernel_code_kerple_log", "training_curves"):
        assert (report_dir / f"{figure}.png").stat().st_size > 1000
        assert f"({figure}.png)" in report
    rows = list(csv.DictReader(open(report_dir / "table3.csv")))
    assert {(r["method"], int(r["length"])) for r in rows} == {
        (m, L) for m in ("kerple_log", "kerple_log + window 64") for L in (64, 128)}
    # Both runs scored the same chunks of the same stream: the windowed baseline differs only past 64.
    results = {json.loads(p.read_text())["run"]["method"]: json.loads(p.read_text())
               for p in (tmp_path / "work/code").glob("*/seed7/eval/*.json")}
    full, windowed = (next(r for r in results[m]["results"] if r["length"] == 128 and r["mode"] == "position")
                      for m in ("kerple_log", "kerple_log+window64"))
    assert full["position_loss"][:64] == pytest.approx(windowed["position_loss"][:64], rel=1e-5)
    assert full["position_loss"][64:] != pytest.approx(windowed["position_loss"][64:], rel=1e-5)

    checkpoint = tmp_path / "work/code/kerple_log/seed7/checkpoints/global_step6"
    stamp = checkpoint.stat().st_mtime_ns
    second = reproduce_here(sweep)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "code/kerple_log/seed7: already finished" in second.stdout
    assert "code/kerple_log+window64/seed7: already finished" in second.stdout
    for log in ("kerple_log/seed7/train.log", "kerple_log/seed7/evaluate.log", "kerple_log+window64/seed7/evaluate.log"):
        assert (tmp_path / "work/code" / log).read_text().count("\n$ ") == 1  # launched by the first run only
    assert checkpoint.stat().st_mtime_ns == stamp
    assert (report_dir / "report.md").is_file()

    # The report's inputs sit beside it: without the work folder, --report-only renders the same tables.
    assert sorted(p.name.split("_seed")[0] for p in (report_dir / "inputs/results").glob("*.json")) == [
        "code_kerple_log", "code_kerple_log+window64"]
    table = (report_dir / "table3.csv").read_text()
    shutil.move(tmp_path / "work", tmp_path / "work-away")
    (report_dir / "table3.csv").unlink()
    rerendered = reproduce_here(sweep, "--report-only")
    assert rerendered.returncode == 0, rerendered.stdout + rerendered.stderr
    assert (report_dir / "table3.csv").read_text() == table
    report = (report_dir / "report.md").read_text()
    assert "re-rendered from the inputs beside it" in report and "(kernel_code_kerple_log.png)" in report
    assert "| code | kerple_log | 1 |" in report  # the training-curve row, from the saved scalars
    shutil.move(tmp_path / "work-away", tmp_path / "work")

    # A changed training config never silently reuses the old checkpoints.
    spec = yaml.safe_load(sweep.read_text())
    spec["set"]["min-lr"] = 1.0e-5
    sweep.write_text(yaml.safe_dump(spec))
    from tools.reproduce.__main__ import main
    from tools.reproduce.spec import SweepError
    monkeypatch.chdir(REPO_ROOT)  # main() works from the repository root
    capsys.readouterr()
    with pytest.raises(SweepError, match="no finished runs"):  # the old results are not reported as the new config's
        main([str(sweep), "--publish"])
    third = capsys.readouterr().out
    assert "FAILED code/kerple_log/seed7:" in third and "different training config" in third
    assert checkpoint.stat().st_mtime_ns == stamp


@pytest.mark.slow
def test_failed_run_is_reported_and_the_rest_continue(tmp_path):
    # sinusoidal adds positions to the embeddings once, so pos-emb-per-layer makes its training fail
    # with the model's own error; kerple_log (per-layer kernels) trains and is evaluated regardless.
    sweep = sweep_file(tmp_path, methods=("sinusoidal", "kerple_log"))
    spec = yaml.safe_load(sweep.read_text())
    spec["set"]["pos-emb-per-layer"] = True
    sweep.write_text(yaml.safe_dump(spec))
    result = reproduce(sweep)
    assert result.returncode == 1
    assert "FAILED code/sinusoidal/seed7: train.py exited with code" in result.stdout
    assert "pos-emb-per-layer is set, but pos-emb 'sinusoidal'" in result.stdout  # the log's tail, quoted
    report = (tmp_path / "report/report.md").read_text()
    assert "**failed** code/sinusoidal/seed7" in report
    assert "2 of 3 planned runs have results" in report
