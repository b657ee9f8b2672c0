"""Issue 24, round 2: writers of results and checkpoints never lose what a user had. eval.py merges a
second task into its result file (or refuses before loading anything); tools/ckpts/import_neox.py
never re-points another run's `latest`; generate.py never overwrites a sample file. Each is checked
in-process and once through its entry point."""
import json
import os
import subprocess
import sys

import pytest

import neox_fork_reference as fork
from megatron.evaluation.lm_eval_run import evaluate_tasks
from megatron.evaluation.results import ResultFileError
from megatron.evaluation.run import EvaluationError
from megatron.neox_arguments import NeoXArgs
from test_hostile_runs import unwritable_folder  # noqa: F401  (fixture)
from test_import_neox_checkpoint import config as fork_config
from test_lm_eval import run  # noqa: F401  (the module fixture: a tiny kerple_log checkpoint and local tasks)
from test_training_support import REPO_ROOT, child_environment
from tools.ckpts.neox_import import CheckpointImportError, import_checkpoint

FORK = fork_config("kerple_log")  # a 2-layer fork checkpoint's sizes (tests/neox_fork_reference.py)


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


# -------------------------------------------------------- rows 2 and 12: tools/ckpts/import_neox.py
def test_import_into_another_runs_save_folder_is_refused_and_its_latest_kept(tmp_path):
    fork.write_fork_checkpoint(tmp_path / "fork", fork.make_weights("alibi", FORK), FORK, "alibi")
    save = tmp_path / "ckpt"  # a save folder of this project's layout, made by one import
    import_checkpoint(tmp_path / "fork", save)
    (save / "global_step7").rename(save / "global_step3")  # as if its run had saved step 3
    (save / "latest").write_text("global_step3")
    with pytest.raises(CheckpointImportError, match=rf"OUT {save} holds a run's checkpoints \(steps \[3\], `latest` "
                       r"names 'global_step3'\)\. The import writes its own `latest` there.*give another OUT "
                       r"\(e\.g\. ckpt-imported\)"):
        import_checkpoint(tmp_path / "fork", save)
    assert (save / "latest").read_text() == "global_step3" and sorted(os.listdir(save)) == ["global_step3", "latest"]
    # Any folder holding something is refused (a crashed import's partial folder too); a file, or a path
    # under one, is named as such; none of it creates anything.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointImportError, match=r"other is not empty \(it holds \['notes.txt'\]\)"):
        import_checkpoint(tmp_path / "fork", other)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointImportError, match=r"OUT .*afile is a file, not a folder"):
        import_checkpoint(tmp_path / "fork", tmp_path / "afile")
    with pytest.raises(CheckpointImportError, match=r"OUT .*afile/out is under .*afile, which is a file"):
        import_checkpoint(tmp_path / "fork", tmp_path / "afile" / "out")
    # An empty folder (or a new one) is what it writes into.
    (tmp_path / "empty").mkdir()
    folder, _ = import_checkpoint(tmp_path / "fork", tmp_path / "empty")
    assert folder == tmp_path / "empty" / "global_step7" and (tmp_path / "empty" / "latest").read_text() == "global_step7"


@pytest.mark.launches  # the unwritable folder is made with chattr when running as root
def test_import_under_an_unwritable_folder_is_refused_before_reading(tmp_path, unwritable_folder):
    with pytest.raises(CheckpointImportError, match=rf"OUT {unwritable_folder}/ours cannot be written: "
                       rf"{unwritable_folder} is not writable"):
        import_checkpoint(tmp_path / "no-fork-needed", unwritable_folder / "ours")


@pytest.mark.launches
def test_import_neox_py_refuses_a_run_folder_in_one_paragraph(tmp_path):
    fork.write_fork_checkpoint(tmp_path / "fork", fork.make_weights("t5", FORK), FORK, "t5")
    save = tmp_path / "run"
    (save / "global_step100").mkdir(parents=True)
    (save / "latest").write_text("global_step100")
    done = subprocess.run([sys.executable, "-m", "tools.ckpts.import_neox", str(tmp_path / "fork"), str(save)],
                          cwd=REPO_ROOT, env=child_environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "imported" not in done.stdout
    assert done.stderr.startswith(f"error: OUT {save} holds a run's checkpoints (steps [100], `latest` names "
                                  "'global_step100')") and len(done.stderr.strip().splitlines()) == 1
    assert (save / "latest").read_text() == "global_step100" and sorted(os.listdir(save)) == ["global_step100", "latest"]


def test_pos_emb_that_disagrees_with_the_saved_config_is_refused_naming_both(tmp_path):
    fork.write_fork_checkpoint(tmp_path / "fork", fork.make_weights("kerple_log", FORK), FORK, "kerple_log")
    saved = tmp_path / "fork" / "global_step7" / "configs" / "run.yml"
    with pytest.raises(CheckpointImportError, match=rf"--pos-emb kerple_power disagrees with the run's config: "
                       rf"{saved}:\d+ says pos-emb kerple_log\..*Leave out --pos-emb"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours", pos_emb="kerple_power")
    with pytest.raises(CheckpointImportError, match=r"--set pos-emb=alibi disagrees with the run's config"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours", overrides={"pos-emb": "alibi"})
    assert not (tmp_path / "ours").exists()
    # The same method in another spelling (the fork's kerple_power_ap_) is no disagreement.
    fork.write_fork_checkpoint(tmp_path / "power", fork.make_weights("kerple_power", FORK), FORK, "kerple_power")
    assert "kerple_power_ap_" in (tmp_path / "power" / "global_step7" / "configs" / "run.yml").read_text()
    folder, _ = import_checkpoint(tmp_path / "power", tmp_path / "ours", pos_emb="kerple_power")
    assert folder.name == "global_step7"
