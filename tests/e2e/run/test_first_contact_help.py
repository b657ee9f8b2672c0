"""First contact, run as a user runs it: each entry point's --help prints its own text (no error output), and
docs/lm-eval.md's local lm-eval task example runs as written against a freshly trained tiny checkpoint. The
help's contents, in-process: tests/run/test_first_contact_help.py."""
import json
import subprocess
import sys

import pytest

from tests.support.first_contact import COMMAND, DATA_FILE, SCRIPTS, TASK_FILE, docstring
from tests.support.training import REPO_ROOT, TINY, child_environment


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_of_each_entry_point_is_its_own(script):
    done = subprocess.run([sys.executable, script, "--help"], cwd=REPO_ROOT, env=child_environment(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "examples:" in done.stdout and "main config keys" in done.stdout
    assert docstring(script).strip().splitlines()[0] in done.stdout
    if script == "eval.py":
        assert "--eval_tasks" in done.stdout and "eval-task-paths (default none)" in done.stdout


def test_the_local_task_example_runs_against_a_freshly_trained_checkpoint(tmp_path, trained_tiny):
    checkpoint, results = trained_tiny, tmp_path / "results"  # train.py's checkpoint (tests/e2e/conftest.py)
    (tmp_path / "my_tasks").mkdir()
    (tmp_path / "my_tasks" / "python_mc.yaml").write_text(TASK_FILE)
    (tmp_path / "my_tasks" / "python_mc.jsonl").write_text(DATA_FILE)
    # README's command, run from the folder holding my_tasks/ (the task's data_files path is relative to it)
    command = COMMAND.replace("python eval.py configs/tiny.yml", f"{sys.executable} {REPO_ROOT / 'eval.py'} {TINY}")
    command = command.replace("load=checkpoints/tiny/kerple_log", f"load={checkpoint}")
    command += f" --set eval-results-dir={results}"
    done = subprocess.run(command, shell=True, cwd=tmp_path, env=child_environment(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "|python_mc|" in done.stdout.replace(" ", "") and "acc" in done.stdout
    result_file = next((results / "lm_eval").glob("*.json"))
    written = json.loads(result_file.read_text())
    assert written["evaluation"]["tasks"] == ["python_mc"] and "acc,none" in written["results"]["python_mc"]
    # lm-eval's own output (progress bars, its log, git's complaint outside a repository) is kept beside the
    # result, named on stdout; the terminal gets the table and the paths alone.
    log = result_file.with_suffix(".log")
    assert f"lm-eval's own output (its log, progress bars, warnings): {log}\n" in done.stdout
    assert done.stderr == "" and "it/s]" in log.read_text()
    assert "is defined, but aggregation is not" not in log.read_text()
