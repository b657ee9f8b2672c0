"""Hostile config values (tests/hostile/test_hostile_config_values.py) through the entry point: `deepy.py train.py
CONFIG --dry-run` prints the refusal as one paragraph and no traceback (the other values through deepy.py's main,
in-process: tests/hostile/test_hostile_config_values.py)."""
from tests.support.config_files import billion_laughs, write
from tests.support.hostile import assert_clear_error, script


def test_deepy_dry_run_prints_one_paragraph_and_no_traceback(tmp_path):
    fragments = ["its aliases (*name) expand to 4,412,961,510 values"]
    config = write(tmp_path, billion_laughs("eval-lengths"))
    assert_clear_error(script("deepy.py", "train.py", str(config), "--dry-run"), *fragments, alone=True)
