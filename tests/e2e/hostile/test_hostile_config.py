"""Hostile inputs, part 1: config mistakes and tool arguments, each one clear error through the entry
point (exit status 2, one `error:` paragraph, no traceback) before any work is done. Issue 17. The config
package refuses them before anything is launched, so one launch of each entry point shows the paragraph
reaching the terminal; every mistake is refused by the same code in-process in tests/hostile/test_hostile_config.py."""
import subprocess
import sys

import pytest

from tests.support.hostile import assert_clear_error
from tests.support.training import REPO_ROOT, child_environment


def run(*argv, cwd=REPO_ROOT):
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=child_environment(), capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("entry, setting, fragments", [
    (["train.py"], "keep-last-n-checkpoints=-1", ["keep-last-n-checkpoints: must be a positive integer", "got -1"]),
    (["evaluate.py"], "eval-micro-batch-size=0", ["eval-micro-batch-size: must be a positive integer", "got 0"]),
    (["deepy.py", "train.py", "--dry-run"], "split=abc", ["split: 'abc' is not train/valid/test weights",
                                                           "e.g. '969,30,1'"]),
], ids=["train.py", "evaluate.py", "deepy.py"])
def test_each_entry_point_prints_a_config_refusal_as_one_paragraph_and_exits_2(entry, setting, fragments, tmp_path):
    save, results = tmp_path / "ckpt", tmp_path / "results"
    result = run(*entry, "configs/tiny.yml", "--set", f"save={save}", "--set", f"eval-results-dir={results}",
                 "--set", setting)
    assert_clear_error(result, "command line: ", *fragments)
    assert not save.exists() and not results.exists()  # nothing was started, so nothing was written


# ------------------------------------------------------------------------------------------ tools
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
