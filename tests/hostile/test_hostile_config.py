"""Hostile inputs, part 1, in this process: config mistakes refused by each entry point's own main (run_cli prints
the one paragraph, exit status 2) before anything is launched -- one launch of each entry point shows that paragraph
reaching the terminal (tests/e2e/hostile/test_hostile_config.py) -- and the start-up folder check, which tests what
is real for this user. Issue 17."""
import os

import pytest

from tests.support.hostile import assert_clear_error, entry_point_in_process
from tests.support.training import TINY

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
def test_bad_values_are_refused_before_anything_runs(setting, fragments, entry, tmp_path, monkeypatch, capsys):
    save, results = tmp_path / "ckpt", tmp_path / "results"
    common = [TINY, "--set", f"save={save}", "--set", f"eval-results-dir={results}", "--set", setting]
    assert_clear_error(entry_point_in_process(monkeypatch, capsys, "deepy.py", "train.py", *common, "--dry-run"),
                       "command line: ", *fragments)
    if entry:
        assert_clear_error(entry_point_in_process(monkeypatch, capsys, entry, *common), "command line: ", *fragments)
    assert not save.exists() and not results.exists()  # nothing was started, so nothing was written


@pytest.mark.parametrize("entry", [["train.py"], ["evaluate.py"], ["deepy.py", "train.py", "--dry-run"]])
def test_a_key_given_twice_on_the_command_line_is_refused(entry, monkeypatch, capsys):
    """As within one YAML file (where it was already an error): not "last wins"."""
    result = entry_point_in_process(monkeypatch, capsys, *entry, TINY, "--set", "num-layers=2", "--set", "num_layers=3")
    assert_clear_error(result, "--set 'num_layers=3' sets 'num-layers' a second time")


def test_deepy_iteration_flag_and_set_iteration_together_are_refused(monkeypatch, capsys):
    result = entry_point_in_process(monkeypatch, capsys, "deepy.py", "train.py", TINY, "--dry-run", "--iteration", "5",
                                "--set", "iteration=3")
    assert_clear_error(result, "--iteration and --set iteration=... both set iteration")


@pytest.mark.parametrize("entry", [["train.py"], ["evaluate.py"], ["deepy.py", "train.py"]])
def test_a_directory_as_config_names_the_directory(entry, tmp_path, monkeypatch, capsys):
    folder = tmp_path / "adir"
    folder.mkdir()
    result = entry_point_in_process(monkeypatch, capsys, *entry, folder)
    assert_clear_error(result, f"Config file {folder} is a directory, not a YAML file")
    assert "adir.yml" not in result.stderr  # deepy.py used to add .yml and say that does not exist


@pytest.mark.parametrize("entry", [["train.py"], ["evaluate.py"], ["deepy.py", "train.py"]])
def test_a_config_that_is_not_utf8_names_the_line(entry, tmp_path, monkeypatch, capsys):
    config = tmp_path / "latin1.yml"
    config.write_bytes("num-layers: 2\n# caf\u00e9 au lait\n".encode("latin-1"))
    result = entry_point_in_process(monkeypatch, capsys, *entry, config)
    assert_clear_error(result, f"Config file {config} is not UTF-8 text: byte 0xe9 on line 2", "Save the file as UTF-8")


def test_preprocessing_into_a_prefix_under_a_file_stops_before_reading(tmp_path, monkeypatch, capsys):
    (tmp_path / "docs.jsonl").write_text('{"text": "hello"}\n')
    blocker = tmp_path / "afile"
    blocker.write_text("x")
    result = entry_point_in_process(monkeypatch, capsys, "tools/datasets/preprocess_data.py", "--input",
                                tmp_path / "docs.jsonl", "--output-prefix", blocker / "out", "--tokenizer-type",
                                "ByteLevelTokenizer")
    assert_clear_error(result, f"--output-prefix's folder {blocker} is a file, not a folder")
    assert blocker.read_text() == "x"


def test_folder_check_tests_what_is_real_for_this_user(tmp_path):
    """Permission bits stop other users but not root, so the start-up check writes a file instead of
    reading the bits: a mode-555 folder is refused for a normal user and accepted for root, who can
    really write there (test_hostile_runs.py refuses a folder even root cannot write to)."""
    from megatron.run.preflight import folder_problem

    folder = tmp_path / "r-x"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        problem = folder_problem(folder, "save")
        if os.geteuid() == 0:
            assert problem is None
        else:
            assert problem and "is not writable by this process (Permission denied)" in problem
        assert list(folder.iterdir()) == []  # the probe file is gone
    finally:
        folder.chmod(0o755)
