"""Hostile config values (tests/hostile/test_hostile_config_values.py) through the entry point: `deepy.py train.py
CONFIG --dry-run` prints the refusal as one paragraph and no traceback."""
import subprocess
import sys

import pytest

from tests.support.config_files import BASE, OPTIMIZER, billion_laughs, write
from tests.support.training import REPO_ROOT, child_environment


@pytest.mark.parametrize("case", ["billion-laughs", "nested-repeat", "long-name"])
def test_deepy_dry_run_prints_one_paragraph_and_no_traceback(case, tmp_path):
    text, fragments = {
        "billion-laughs": (billion_laughs("eval-lengths"), ["its aliases (*name) expand to 4,412,961,510 values"]),
        "nested-repeat": (BASE + OPTIMIZER + "    lr: 5.0\n", ["line 9: key 'optimizer.params.lr' is given twice"]),
        "long-name": (BASE + f"save: {tmp_path / ('s' * 300)}\n", [":5: save: the name 'sss", "(NAME_MAX)"]),
    }[case]
    config = write(tmp_path, text)
    done = subprocess.run([sys.executable, "deepy.py", "train.py", str(config), "--dry-run"], cwd=REPO_ROOT,
                          env=child_environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and "[WARNING]" not in line]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
