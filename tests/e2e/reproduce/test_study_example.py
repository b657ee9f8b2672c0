"""The "run your own study" guide's example (configs/studies/example.yml) through the real runner: its methods x
lengths as written, side by side (its `jobs: 2`), at a few steps and its first seed, on the test corpus; the report's
table and figure. Its whole grid, every seed, is planned by the docs test's `--dry-run` of it ("Trainings: 4")."""
import csv
import json
import subprocess
import sys

import yaml

from tests.support.reproduce import REPO_ROOT

EXAMPLE = REPO_ROOT / "configs/studies/example.yml"


def test_the_example_study_runs_through_the_runner(stdlib_data, tmp_path):
    spec = yaml.safe_load(EXAMPLE.read_text())
    methods, seeds, lengths = spec["methods"], spec["seeds"], spec["evaluation"]["eval-lengths"]
    # Only what makes it cheap changes: steps, chunks, one seed, the corpus (the session's slice) and the folders. A
    # second seed is two more trainings and evaluations through the same code (a run folder and a --set seed each).
    spec["seeds"] = seeds = spec["seeds"][:1]
    spec["set"].update({"train-iters": 4, "eval-interval": 4, "eval-iters": 1, "log-interval": 2,
                        "checkpoint-factor": 4, "split": "90,8,2"})
    spec["evaluation"]["eval-chunks"] = 2
    spec["data"]["stdlib"]["prefix"] = stdlib_data
    spec["work_dir"], spec["report_dir"] = str(tmp_path / "work"), str(tmp_path / "published")
    sweep = tmp_path / "example.yml"
    sweep.write_text(yaml.safe_dump(spec))

    done = subprocess.run([sys.executable, "-m", "tools.reproduce", str(sweep)], cwd=REPO_ROOT,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    runs = len(methods) * len(seeds)
    assert f"[{runs}/{runs}]" in done.stdout
    report_dir = tmp_path / "work/report"  # without --publish the report stays in the study's own folder
    assert not (tmp_path / "published").exists()
    rows = list(csv.DictReader(open(report_dir / "table3.csv")))
    assert {(r["method"], int(r["length"])) for r in rows} == {(m, L) for m in methods for L in lengths}
    assert (report_dir / "ppl_vs_length.png").stat().st_size > 1000
    report = (report_dir / "report.md").read_text()
    assert f"{runs} of {runs} planned runs have results" in report and "(ppl_vs_length.png)" in report
    results = [json.loads(p.read_text()) for p in (tmp_path / "work/stdlib").glob("*/seed*/eval/*.json")]
    assert sorted((r["run"]["method"], r["run"]["seed"]) for r in results) == sorted(
        (m, s) for m in methods for s in seeds)
