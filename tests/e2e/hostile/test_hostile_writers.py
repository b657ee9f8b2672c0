"""Writers of results and checkpoints never lose what a user had, through the entry points (eval.py,
generate.py, tools/ckpts/import_neox.py, convert_to_hf.py) and where a check starts a process itself (lm-eval
runs `git describe`; the unwritable folder is made with chattr when running as root). The in-process half:
tests/hostile/test_hostile_writers.py."""
import json
import os
import subprocess
import sys

import pytest

from megatron.evaluation.lm_eval_run import evaluate_tasks
from megatron.evaluation.results import ResultFileError
from megatron.neox_arguments import NeoXArgs
from megatron.text_generation import GenerationError
from tests.support import neox_fork as fork
from tests.support.generation import generate_run_of
from tests.support.hostile import FORK, GENERATION, entry_point_in_process, generation_args
from tests.support.hostile import unwritable_folder  # noqa: F401  (fixture)
from tests.support.lm_eval import run  # noqa: F401  (the module fixture: a tiny kerple_log checkpoint and local tasks)
from tests.support.training import REPO_ROOT, TINY, child_environment
from tools.ckpts.hf_export import ExportError, export_checkpoint
from tools.ckpts.neox_import import CheckpointImportError, import_checkpoint


def generate_py(config, load, *sets, in_process=None):
    """generate.py on `config` with `--set` for each of `sets` (KEY=VALUE), one short sample by default; launched,
    or with in_process=(monkeypatch, capsys) its own main run in this process (entry_point_in_process)."""
    given = {s.split("=")[0].replace("_", "-") for s in sets}
    sets = [s for s in ("num-samples=1", "maximum-tokens=8") if s.split("=")[0] not in given] + list(sets)
    argv = ["generate.py", str(config), str(GENERATION), "--set", f"load={load}",
            *[x for s in sets for x in ("--set", s)]]
    if in_process:
        return entry_point_in_process(*in_process, *argv)
    return subprocess.run([sys.executable, *argv], cwd=REPO_ROOT, env=child_environment(), capture_output=True,
                          text=True, timeout=300)


def tasks_of(args):
    return evaluate_tasks(args.evaluation_run(), args.lm_eval_tasks())


def lm_eval_args(run, results, *tasks, **overrides):  # noqa: F811
    return NeoXArgs.from_ymls([run["config"]], {"eval_tasks": list(tasks), "eval_task_paths": [str(run["tasks"])],
                                                "eval_results_dir": str(results), **overrides})


def eval_py(run, results, *argv, in_process=None):  # noqa: F811
    """eval.py on the tiny run; launched, or with in_process=(monkeypatch, capsys) its own main run in this process
    (entry_point_in_process; tests/support/lm_eval.py keeps this process offline as the launch's environment)."""
    argv = ["eval.py", str(run["config"]), *argv, "--set", f"eval-task-paths=[{run['tasks']}]",
            "--set", f"eval-results-dir={results}"]
    if in_process:
        return entry_point_in_process(*in_process, *argv)
    return subprocess.run([sys.executable, *argv], cwd=REPO_ROOT,
                          env={**child_environment(), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=300)


# ----------------------------------------------------------------------- row 1: eval.py's result file
def test_a_second_task_merges_into_the_result_file_and_other_settings_are_refused(run, tmp_path):  # noqa: F811
    first = tasks_of(lm_eval_args(run, tmp_path, "local_mc"))
    mc = json.loads(first.read_text())["results"]["local_mc"]
    second = tasks_of(lm_eval_args(run, tmp_path, "local_rolling"))
    assert second == first
    document = json.loads(first.read_text())
    assert document["evaluation"]["tasks"] == ["local_mc", "local_rolling"]
    assert set(document["results"]) == {"local_mc", "local_rolling"} and document["results"]["local_mc"] == mc
    assert set(document["versions"]) == set(document["n-shot"]) == {"local_mc", "local_rolling"}
    # Scored another way (a limit): refused before lm-eval or the model is loaded; the file is as it was.
    before = first.read_bytes()
    with pytest.raises(ResultFileError, match=r"already holds lm-eval results of this checkpoint, scored differently "
                       r"\(limit: earlier None, now 1.0\).*never overwritten: write into another eval-results-dir"):
        tasks_of(lm_eval_args(run, tmp_path, "local_mc", eval_task_limit=1))
    first.write_text("{not json")
    with pytest.raises(ResultFileError, match=r"already exists and cannot be read as an lm-eval result file"):
        tasks_of(lm_eval_args(run, tmp_path, "local_mc"))
    first.write_bytes(before)
    assert not [p for p in first.parent.iterdir() if p.name.startswith(".")]  # no temporary file left


def test_eval_py_task_a_then_task_b_keeps_both(run, tmp_path, monkeypatch, capsys):  # noqa: F811
    for task in ("local_mc", "local_gen"):
        done = eval_py(run, tmp_path, "--eval_tasks", task)
        assert done.returncode == 0, done.stderr[-3000:]
    [path] = (tmp_path / "lm_eval").glob("*.json")
    assert set(json.loads(path.read_text())["results"]) == {"local_mc", "local_gen"}
    assert "kept the earlier results there for tasks ['local_mc']" in done.stdout
    refused = eval_py(run, tmp_path, "--eval_tasks", "local_mc", "--set", "eval-task-num-fewshot=1",
                      in_process=(monkeypatch, capsys))
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "num_fewshot: earlier None, now 1" in refused.stderr
    assert set(json.loads(path.read_text())["results"]) == {"local_mc", "local_gen"}


# -------------------------------------------------------- rows 2 and 12: tools/ckpts/import_neox.py
def test_import_under_an_unwritable_folder_is_refused_before_reading(tmp_path, unwritable_folder):
    with pytest.raises(CheckpointImportError, match=rf"OUT {unwritable_folder}/ours cannot be written: "
                       rf"{unwritable_folder} is not writable"):
        import_checkpoint(tmp_path / "no-fork-needed", unwritable_folder / "ours")


def test_import_neox_py_refuses_a_run_folder_in_one_paragraph(tmp_path, monkeypatch, capsys):
    # Its main in this process (entry_point_in_process); tools/ckpts/import_neox.py is launched in
    # test_hostile_checkpoint_code.py.
    fork.write_fork_checkpoint(tmp_path / "fork", fork.make_weights("t5", FORK), FORK, "t5")
    save = tmp_path / "run"
    (save / "global_step100").mkdir(parents=True)
    (save / "latest").write_text("global_step100")
    done = entry_point_in_process(monkeypatch, capsys, "tools/ckpts/import_neox.py", tmp_path / "fork", save)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "imported" not in done.stdout
    assert done.stderr.startswith(f"error: OUT {save} holds a run's checkpoints (steps [100], `latest` names "
                                  "'global_step100')") and len(done.stderr.strip().splitlines()) == 1
    assert (save / "latest").read_text() == "global_step100"
    assert sorted(os.listdir(save)) == ["global_step100", "latest"]


# ------------------------------------------------------------- rows 3, 17-20: generate.py up front
def test_an_output_file_in_an_unwritable_folder_is_found_before_loading(tmp_path, unwritable_folder):
    with pytest.raises(GenerationError, match=rf"sample-output-file: {unwritable_folder}/sub/s.jsonl cannot be "
                       rf"written: {unwritable_folder} is not writable by this process"):
        generate_run_of(generation_args(tmp_path, sample_output_file=str(unwritable_folder / "sub" / "s.jsonl")))


def test_generate_py_writes_a_new_sample_file_and_refuses_it_the_second_time(run, tmp_path, monkeypatch,  # noqa: F811
                                                                               capsys):
    output = tmp_path / "samples.jsonl"
    first = generate_py(run["config"], run["root"] / "ckpt", f"sample-output-file={output}")
    assert first.returncode == 0, first.stderr[-3000:]
    written = output.read_text()
    assert len(written.splitlines()) == 1 and json.loads(written)["length"] <= 8
    again = generate_py(run["config"], run["root"] / "ckpt", f"sample-output-file={output}",
                        in_process=(monkeypatch, capsys))
    assert again.returncode == 2 and "Traceback" not in again.stderr and "generating with" not in again.stderr
    assert again.stderr.startswith(f"error: command line: sample-output-file: {output} exists already, and it is "
                                   "never overwritten")
    assert output.read_text() == written and os.listdir(tmp_path) == ["samples.jsonl"]


@pytest.mark.parametrize("flags, message", [
    (["sample-output-file={tmp}/afile/s.jsonl"], "{tmp}/afile"),
    (["sample-output-file={tmp}"], "sample-output-file: {tmp} is a folder"),
    (["text-gen-type=input-file", "sample-input-file={tmp}/latin1.txt"], "sample-input-file {tmp}/latin1.txt is "
                                                                         "not UTF-8 text: byte 0xe9"),
    (["text-gen-type=input-file", "sample-input-file={tmp}/prompts.txt", "prompt-end=''"], "prompt-end: is empty"),
    (["maximum-tokens=1000000000"], "maximum-tokens 1,000,000,000 cannot fit"),
], ids=["output-under-a-file", "output-a-folder", "not-utf8", "empty-prompt-end", "kv-cache"])
def test_generate_py_refuses_bad_inputs_in_one_paragraph_before_loading(flags, message, tmp_path, monkeypatch, capsys,
                                                                        request):
    (tmp_path / "afile").write_text("mine")
    (tmp_path / "latin1.txt").write_bytes("café\n".encode("latin-1"))
    (tmp_path / "prompts.txt").write_text("def main(\n")
    flags = [flag.format(tmp=tmp_path) for flag in flags]
    # One launch shows the paragraph reaching the terminal; the others run generate.py's own main in this process.
    launched = request.node.callspec.id == "kv-cache"
    done = generate_py(TINY, tmp_path / "no-checkpoint", *flags, in_process=None if launched else (monkeypatch, capsys))
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert message.format(tmp=tmp_path) in done.stderr and "no-checkpoint" not in done.stderr
    assert (flags[-1].split("=")[0] in done.stderr or "maximum" in flags[-1]) and done.stdout.count("generating") == 0
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


# ------------------------------------------------------ rows 22 and 5: eval.py's limit and lengths
def test_eval_py_refuses_an_eval_task_limit_of_zero_in_one_paragraph(run, tmp_path, monkeypatch, capsys):  # noqa: F811
    done = eval_py(run, tmp_path, "--eval_tasks", "local_mc", "--set", "eval-task-limit=0",
                   in_process=(monkeypatch, capsys))
    assert done.returncode == 2 and "Traceback" not in done.stderr and "eval-task-limit" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and not (tmp_path / "lm_eval").exists()


def test_eval_py_scores_a_rolling_task_at_a_huge_eval_task_length_as_at_a_short_one(run, tmp_path):  # noqa: F811
    values = {}
    for length in (256, 1_000_000_000):
        done = eval_py(run, tmp_path / str(length), "--eval_tasks", "local_rolling",
                       "--set", f"eval-task-length={length}")
        assert done.returncode == 0, done.stderr[-3000:]
        [path] = (tmp_path / str(length) / "lm_eval").glob("*.json")
        values[length] = json.loads(path.read_text())["results"]["local_rolling"]["word_perplexity,none"]
    assert values[1_000_000_000] == pytest.approx(values[256], rel=1e-5)


# ----------------------------------------------------------- row 21: tools/ckpts/convert_to_hf.py
def test_an_output_dir_under_an_unwritable_folder_is_refused_before_loading(tmp_path, unwritable_folder):
    with pytest.raises(ExportError, match=rf"^--output_dir {unwritable_folder}/hf cannot be written: "
                       rf"{unwritable_folder} is not writable by this process"):
        export_checkpoint(tmp_path / "no-checkpoint" / "global_step5", unwritable_folder / "hf")


def test_convert_to_hf_py_refuses_an_output_dir_that_is_a_file_in_one_paragraph(tmp_path, monkeypatch, capsys):
    # Its main in this process (entry_point_in_process); tools/ckpts/convert_to_hf.py is launched in
    # test_hostile_checkpoint_code.py and test_hostile_round3.py.
    (tmp_path / "afile").write_text("mine")
    done = entry_point_in_process(monkeypatch, capsys, "tools/ckpts/convert_to_hf.py", "--input_dir",
                                  tmp_path / "no-checkpoint", "--output_dir", tmp_path / "afile")
    assert done.returncode == 2 and "Traceback" not in done.stderr and "no-checkpoint" not in done.stderr
    assert done.stderr.startswith(f"error: --output_dir {tmp_path / 'afile'} is a file, not a folder")
    assert len(done.stderr.strip().splitlines()) == 1 and (tmp_path / "afile").read_text() == "mine"
