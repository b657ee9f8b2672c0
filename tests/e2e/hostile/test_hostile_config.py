"""Hostile inputs, part 1: config mistakes and tool arguments, each one clear error through the entry
point (exit status 2, one `error:` paragraph, no traceback) before any work is done. Issue 17."""
import subprocess
import sys

import pytest

from tests.support.hostile import assert_clear_error
from tests.support.training import REPO_ROOT, child_environment


def run(*argv, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=child_environment(), capture_output=True,
                          text=True, timeout=300)


# Values that used to pass validation and then lose data (1), give a wrong result (3) or end in a
# library's traceback. deepy.py --dry-run validates exactly as the ranks do (and fast); the entry point
# that uses each key most checks it too.
BAD_VALUES = [
    ("keep-last-n-checkpoints=-1", ["keep-last-n-checkpoints: must be a positive integer", "got -1"], "train.py"),
    ("keep-last-n-checkpoints=0", ["keep-last-n-checkpoints: must be a positive integer", "got 0"], None),
    ("checkpoint-factor=0", ["checkpoint-factor: must be a positive number of steps", "got 0"], None),
    ("eval-micro-batch-size=-1", ["eval-micro-batch-size: must be a positive integer", "got -1"], "evaluate.py"),
    ("eval-micro-batch-size=0", ["eval-micro-batch-size: must be a positive integer", "got 0"], "evaluate.py"),
    ("optimizer.params.lr=-0.001", ["optimizer: params.lr must be a positive learning rate, got -0.001"],
     "train.py"),
    ("min_lr=-1", ["min-lr: must be >= 0, got -1.0"], None),
    ("split=abc", ["split: 'abc' is not train/valid/test weights", "e.g. '969,30,1'"], "train.py"),
    ("split=0,0,0", ["split: '0,0,0' is not train/valid/test weights"], None),
]
@pytest.mark.parametrize("setting, fragments, entry", BAD_VALUES)
def test_bad_values_are_refused_before_anything_runs(setting, fragments, entry, tmp_path):
    save, results = tmp_path / "ckpt", tmp_path / "results"
    common = ["configs/tiny.yml", "--set", f"save={save}", "--set", f"eval-results-dir={results}", "--set", setting]
    assert_clear_error(run("deepy.py", "train.py", *common, "--dry-run"), "command line: ", *fragments)
    if entry:
        assert_clear_error(run(entry, *common), "command line: ", *fragments)
    assert not save.exists() and not results.exists()  # nothing was started, so nothing was written
@pytest.mark.parametrize("entry", [["train.py"], ["evaluate.py"], ["deepy.py", "train.py", "--dry-run"]])
def test_a_key_given_twice_on_the_command_line_is_refused(entry):
    """As within one YAML file (where it was already an error): not "last wins"."""
    result = run(*entry, "configs/tiny.yml", "--set", "num-layers=2", "--set", "num_layers=3")
    assert_clear_error(result, "--set 'num_layers=3' sets 'num-layers' a second time")
def test_deepy_iteration_flag_and_set_iteration_together_are_refused():
    result = run("deepy.py", "train.py", "configs/tiny.yml", "--dry-run", "--iteration", "5", "--set", "iteration=3")
    assert_clear_error(result, "--iteration and --set iteration=... both set iteration")
@pytest.mark.parametrize("entry", [["train.py"], ["evaluate.py"], ["deepy.py", "train.py"]])
def test_a_directory_as_config_names_the_directory(entry, tmp_path):
    folder = tmp_path / "adir"
    folder.mkdir()
    result = run(*entry, str(folder))
    assert_clear_error(result, f"Config file {folder} is a directory, not a YAML file")
    assert "adir.yml" not in result.stderr  # deepy.py used to add .yml and say that does not exist
@pytest.mark.parametrize("entry", [["train.py"], ["evaluate.py"], ["deepy.py", "train.py"]])
def test_a_config_that_is_not_utf8_names_the_line(entry, tmp_path):
    config = tmp_path / "latin1.yml"
    config.write_bytes("num-layers: 2\n# caf\u00e9 au lait\n".encode("latin-1"))
    result = run(*entry, str(config))
    assert_clear_error(result, f"Config file {config} is not UTF-8 text: byte 0xe9 on line 2", "Save the file as UTF-8")


# ------------------------------------------------------------------------------------------ tools
def test_preprocessing_into_a_prefix_under_a_file_stops_before_reading(tmp_path):
    (tmp_path / "docs.jsonl").write_text('{"text": "hello"}\n')
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    result = run("tools/datasets/preprocess_data.py", "--input", str(tmp_path / "docs.jsonl"),
                 "--output-prefix", str(blocker / "out"), "--tokenizer-type", "ByteLevelTokenizer")
    assert_clear_error(result, f"--output-prefix's folder {blocker} is a file, not a folder")
    assert blocker.read_text() == "x"
def test_make_tables_out_that_is_a_file_is_refused_first(tmp_path):
    blocker = tmp_path / "tables"
    blocker.write_text("keep me")
    # The results folder does not even exist: --out is checked before anything is read.
    result = run("-m", "tools.analysis.make_tables", str(tmp_path / "no-results"), "--out", str(blocker))
    assert_clear_error(result, f"--out {blocker} is a file, not a folder")
    assert blocker.read_text() == "keep me"
@pytest.mark.parametrize("entry", [["-m", "tools.reproduce"], ["tools/reproduce"]])
def test_reproduce_given_a_directory_says_so(entry, tmp_path):
    result = run(*entry, str(tmp_path))
    assert_clear_error(result, f"sweep file {tmp_path} is a directory, not a sweep file")


