"""Hostile inputs, part 2: what train.py and evaluate.py find at start-up (before any data is read or
any step is spent), the config a checkpoint keeps, and result files that are merged or refused but never
overwritten. Issue 17. One launch of train.py shows a start-up refusal reaching the terminal, and one of evaluate.py
a `load` that is a file; the other refusals run the entry point's own main in this process (train.py's:
tests/hostile/test_hostile_runs.py, and here the one whose folder chattr makes unwritable)."""
import json
import os
import stat

import pytest

from tests.support.hostile import assert_clear_error, evaluate, evaluate_in_process, train, train_in_process
from tests.support.hostile import unwritable_folder  # noqa: F401 (fixture)
from tests.support.training import TINY


def assert_no_training(result):
    assert "step 1/" not in result.stdout, result.stdout[-2000:]


# ------------------------------------------------------------------------------- start-up checks
def test_save_that_is_a_file_is_found_before_training(stdlib_data, tmp_path):
    blocker = tmp_path / "ckpt-file"
    blocker.write_text("not a folder")
    result = train(stdlib_data, tmp_path, save=str(blocker), load=None)
    assert_clear_error(result, f"command line: save {blocker} is a file, not a folder")
    assert_no_training(result)
    assert blocker.read_text() == "not a folder"


def test_save_folder_nobody_can_write_is_found_before_training(stdlib_data, tmp_path, unwritable_folder,
                                                               monkeypatch, capsys):
    result = train_in_process(monkeypatch, capsys, stdlib_data, tmp_path, save=str(unwritable_folder / "run"),
                              load=None)
    assert_clear_error(result, f"save {unwritable_folder / 'run'} is not writable by this process")
    assert_no_training(result)


def test_load_that_is_a_file_is_called_a_file_by_evaluate_py(tmp_path):  # train.py's: tests/hostile/
    blocker = tmp_path / "ckpt-file"
    blocker.write_text("x")
    assert_clear_error(evaluate(TINY, load=str(blocker)), f"{blocker} (key `load`) is a file, not a folder")


# ------------------------------------------------------------------- checkpoints and their config
@pytest.fixture(scope="module")
def three_layer_run(stdlib_data, tmp_path_factory):
    """A run trained with `--set num-layers=3` (the tiny profile says 2): 2 steps, saved."""
    folder = tmp_path_factory.mktemp("three-layers")
    result = train(stdlib_data, folder, num_layers=3)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return folder / "ckpt"


def test_the_checkpoint_config_includes_the_overrides_and_loads_it(three_layer_run, stdlib_data, tmp_path,
                                                                   monkeypatch, capsys):
    resolved = three_layer_run / "global_step2" / "resolved_config.yml"
    assert "num_layers: 3" in resolved.read_text() and "# command line" in resolved.read_text()
    # The files alone give the wrong model; the error points at the file that gives the right one.
    result = evaluate_in_process(monkeypatch, capsys, TINY, load=str(three_layer_run), data_path=stdlib_data,
                                 eval_results_dir=str(tmp_path))
    assert_clear_error(result, "num-layers: checkpoint 3, this run 2", f"the config it was trained with: {resolved}")
    # Following that advice works.
    result = evaluate(resolved, eval_results_dir=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    assert len(list(tmp_path.glob("*.json"))) == 1


def test_evaluating_again_merges_or_refuses_never_overwrites(three_layer_run, tmp_path, monkeypatch, capsys):
    resolved = three_layer_run / "global_step2" / "resolved_config.yml"
    results = tmp_path / "results"
    first = evaluate(resolved, eval_results_dir=str(results), eval_lengths="[64]", umask=0o027)
    assert first.returncode == 0, first.stderr[-3000:]
    (path,) = results.glob("*.json")
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # the umask's, not mkstemp's 0600
    earlier = json.loads(path.read_text())["results"]

    second = evaluate(resolved, eval_results_dir=str(results), eval_lengths="[128]")
    assert second.returncode == 0, second.stderr[-3000:]
    assert "kept the 1 earlier records there it did not score again" in second.stdout
    merged = json.loads(path.read_text())["results"]
    assert [(r["length"], r["mode"]) for r in merged] == [(64, "nonoverlap"), (128, "nonoverlap")]
    assert merged[0] == earlier[0]

    # Scored differently (other chunks of the stream): refused before scoring, the file untouched.
    before = path.read_bytes()
    third = evaluate_in_process(monkeypatch, capsys, resolved, eval_results_dir=str(results), eval_lengths="[128]",
                                eval_seed=5)
    assert_clear_error(third, f"{path} already holds results of this checkpoint, scored differently "
                              "(eval_seed: earlier 0, now 5)", "It is never overwritten")
    assert "L=128" not in third.stdout and path.read_bytes() == before


def test_results_folder_that_is_a_file_or_unwritable_is_found_before_scoring(three_layer_run, tmp_path,
                                                                            unwritable_folder, monkeypatch, capsys):
    resolved = three_layer_run / "global_step2" / "resolved_config.yml"
    blocker = tmp_path / "results-file"
    blocker.write_text("x")
    result = evaluate_in_process(monkeypatch, capsys, resolved, eval_results_dir=str(blocker))
    assert_clear_error(result, f"eval-results-dir {blocker} is a file, not a folder")
    assert "evaluating" not in result.stdout
    result = evaluate_in_process(monkeypatch, capsys, resolved, eval_results_dir=str(unwritable_folder))
    assert_clear_error(result, f"eval-results-dir {unwritable_folder} is not writable by this process")
    assert "evaluating" not in result.stdout


@pytest.mark.parametrize("content, fragment", [
    ("", "should name a checkpoint folder like global_step100 but holds ''"),
    ("../../../etc", "should name a checkpoint folder like global_step100 but holds '../../../etc'"),
])
def test_a_damaged_latest_is_named_as_such(content, fragment, three_layer_run, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "ckpt"
    folder.mkdir()
    os.symlink(three_layer_run / "global_step2", folder / "global_step2")
    (folder / "latest").write_text(content)
    resolved = three_layer_run / "global_step2" / "resolved_config.yml"
    result = evaluate_in_process(monkeypatch, capsys, resolved, load=str(folder), eval_results_dir=str(tmp_path / "r"))
    assert_clear_error(result, fragment, "It holds checkpoints for steps [2]")
    assert "contains no model states" not in result.stderr
