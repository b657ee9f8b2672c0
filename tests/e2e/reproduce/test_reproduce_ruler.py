"""The reproduction sweep with RULER among its measures (`ruler:` in the sweep YAML): eval.py runs the tasks on
every run, the report shows the RULER table and the effective lengths, ruler_table and make_tables print eval.py's
results, and a re-run skips the finished work
(bad `ruler` entries and the plan's line: tests/reproduce/test_reproduce_ruler.py)."""
import argparse
import json
import re
import subprocess
import sys

import pytest
import yaml

from tests.support.reproduce import REPO_ROOT, reproduce as reproduce_in, reproduce_here
from tests.support.reproduce import ruler_sweep_file as ruler_sweep


def reproduce(*argv) -> subprocess.CompletedProcess:
    """With room for eval.py's generations on a busy machine."""
    return reproduce_in(*argv, timeout=1200)


def test_sweep_runs_ruler_reports_effective_lengths_and_the_tools_print_them(tmp_path):
    """One run trained and evaluated first without `ruler`; RULER added to the finished run runs eval.py only (not
    train.py or evaluate.py again), the report shows it, ruler_table's command and make_tables' selection print its
    results, a re-run launches nothing and --report-only renders the report from the inputs beside it (these two
    launch nothing: main() in this process). A fresh run with `ruler` takes the same steps in one invocation:
    training, evaluate.py, then eval.py, each skipped when done."""
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
        assert document["evaluation"]["max_length"] == 512
        measured = document["ruler"]["niah_single_1"]
        assert measured["64"]["score"] is None and "no sample fits" in measured["64"]["note"]
        assert measured["512"]["n"] == 2 and len(measured["512"]["scores"]) == 2
        assert "512,none" in document["results"]["niah_single_1"]
    report = (tmp_path / "report/report.md").read_text()
    assert "## RULER and the effective length of every method" in report
    assert "RULER niah_single_1: score" in report and "| 64 (1×) | no sample fits |" in report
    assert "Effective length by method" in report and "| ppl (nonoverlap) |" in report
    assert "| niah_single_1 |" in report
    for stem in ("ruler_code", "effective_length_code"):  # each table beside its figure
        assert f"({stem}.png)" in report and (tmp_path / f"report/{stem}.png").stat().st_size > 0
    saved = sorted(p.name.split("_seed")[0] for p in (tmp_path / "report/inputs/lm_eval").glob("*.json"))
    assert saved == ["code_kerple_log"]

    # eval.py's results as the tools print them: the ruler_table command, and make_tables' selection of them
    results = tmp_path / "work/code/kerple_log/seed7/eval"
    table = subprocess.run([sys.executable, "-m", "tools.analysis.ruler_table", str(results)], cwd=REPO_ROOT,
                           capture_output=True, text=True, timeout=120)
    assert table.returncode == 0, table.stderr
    assert re.search(r"\| 64 \(1×\) \| no sample fits \|", table.stdout)
    assert re.search(r"\| 512 \(8×\) \| \d\.\d{3} \[\d\.\d\d, \d\.\d\d\] n=2 \|", table.stdout)
    # make_tables' selection applies to them: --length, --rename (the label shown), --ruler-task
    from megatron.evaluation.results import ResultFileError
    from tools.analysis.long_context_tables import long_context_tables
    selection = dict(results=[str(results)], method=None, name=None, seed=None, keep_lengths=[512],
                     rename=["kerple_log=KERPLE"], ruler_task=["niah_*"], reference="KERPLE", alpha=0.05)
    shown = long_context_tables(argparse.Namespace(**selection), [])
    assert "RULER niah_single_1" in shown and "| length | KERPLE |" in shown and "| 64 (1×)" not in shown
    assert re.search(r"\| niah_single_1 \| (none \(score 0 at 512\)|512 \(8×\)) \|", shown)
    with pytest.raises(ResultFileError, match=r"--ruler-task 'ruler_cwe': no RULER result of these tasks in the runs "
                       r"selected \(their tasks: niah_single_1\)"):
        long_context_tables(argparse.Namespace(**{**selection, "ruler_task": ["ruler_cwe"]}), [])

    second = reproduce_here(sweep)  # finished: neither evaluate.py nor eval.py runs again
    assert second.returncode == 0, second.stdout + second.stderr
    assert "code/kerple_log/seed7: already finished" in second.stdout
    assert (tmp_path / "work/code/kerple_log/seed7/ruler.log").read_text().count("\n$ ") == 1
    (tmp_path / "report/report.md").unlink()
    rerendered = reproduce_here(sweep, "--report-only")  # from the inputs beside the report
    assert rerendered.returncode == 0, rerendered.stdout + rerendered.stderr
    assert "| niah_single_1 |" in (tmp_path / "report/report.md").read_text()
