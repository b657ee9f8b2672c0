"""Issue 24, round 2: writers of results and checkpoints never lose what a user had. eval.py merges a
second task into its result file (or refuses before loading anything); tools/ckpts/import_neox.py
never re-points another run's `latest`; generate.py never overwrites a sample file. Each is checked
in-process and once through its entry point."""
import json
import os
import subprocess
import sys

import pytest

from megatron.evaluation.lm_eval_run import evaluate_tasks
from megatron.evaluation.results import ResultFileError
from megatron.evaluation.run import EvaluationError
from megatron.neox_arguments import NeoXArgs
from test_lm_eval import run  # noqa: F401  (the module fixture: a tiny kerple_log checkpoint and local tasks)
from test_training_support import REPO_ROOT, child_environment


def lm_eval_args(run, results, *tasks, **overrides):  # noqa: F811
    return NeoXArgs.from_ymls([run["config"]], {"eval_tasks": list(tasks), "eval_task_paths": [str(run["tasks"])],
                                                "eval_results_dir": str(results), **overrides})


def eval_py(run, results, *argv):  # noqa: F811
    return subprocess.run([sys.executable, "eval.py", str(run["config"]), *argv, "--set",
                           f"eval-task-paths=[{run['tasks']}]", "--set", f"eval-results-dir={results}"],
                          cwd=REPO_ROOT, env={**child_environment(), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=300)


# ----------------------------------------------------------------------- row 1: eval.py's result file
@pytest.mark.launches  # lm-eval's simple_evaluate runs `git describe`
def test_a_second_task_merges_into_the_result_file_and_other_settings_are_refused(run, tmp_path):  # noqa: F811
    first = evaluate_tasks(lm_eval_args(run, tmp_path, "local_mc"))
    mc = json.loads(first.read_text())["results"]["local_mc"]
    second = evaluate_tasks(lm_eval_args(run, tmp_path, "local_rolling"))
    assert second == first
    document = json.loads(first.read_text())
    assert document["evaluation"]["tasks"] == ["local_mc", "local_rolling"]
    assert set(document["results"]) == {"local_mc", "local_rolling"} and document["results"]["local_mc"] == mc
    assert set(document["versions"]) == set(document["n-shot"]) == {"local_mc", "local_rolling"}
    # Scored another way (a limit): refused before lm-eval or the model is loaded; the file is as it was.
    before = first.read_bytes()
    with pytest.raises(ResultFileError, match=r"already holds lm-eval results of this checkpoint, scored differently "
                       r"\(limit: earlier None, now 1.0\).*never overwritten: write into another eval-results-dir"):
        evaluate_tasks(lm_eval_args(run, tmp_path, "local_mc", eval_task_limit=1))
    first.write_text("{not json")
    with pytest.raises(ResultFileError, match=r"already exists and cannot be read as an lm-eval result file"):
        evaluate_tasks(lm_eval_args(run, tmp_path, "local_mc"))
    first.write_bytes(before)
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


@pytest.mark.launches
def test_eval_py_task_a_then_task_b_keeps_both(run, tmp_path):  # noqa: F811
    for task in ("local_mc", "local_gen"):
        done = eval_py(run, tmp_path, "--eval_tasks", task)
        assert done.returncode == 0, done.stderr[-3000:]
    [path] = (tmp_path / "lm_eval").glob("*.json")
    assert set(json.loads(path.read_text())["results"]) == {"local_mc", "local_gen"}
    assert "kept the earlier results there for tasks ['local_mc']" in done.stdout
    refused = eval_py(run, tmp_path, "--eval_tasks", "local_mc", "--set", "eval-task-num-fewshot=1")
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "num_fewshot: earlier None, now 1" in refused.stderr
    assert set(json.loads(path.read_text())["results"]) == {"local_mc", "local_gen"}
