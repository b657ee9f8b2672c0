"""Hostile config values (tests/hostile/test_hostile_config_values.py) through the entry point: `deepy.py train.py
CONFIG --dry-run` prints the refusal as one paragraph and no traceback (the other values through deepy.py's main,
in-process: tests/hostile/test_hostile_config_values.py)."""
import subprocess
import sys

from tests.support.config_files import billion_laughs, write
from tests.support.training import REPO_ROOT, child_environment


def test_deepy_dry_run_prints_one_paragraph_and_no_traceback(tmp_path):
    fragments = ["its aliases (*name) expand to 4,412,961,510 values"]
    config = write(tmp_path, billion_laughs("eval-lengths"))
    done = subprocess.run([sys.executable, "deepy.py", "train.py", str(config), "--dry-run"], cwd=REPO_ROOT,
                          env=child_environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip() and "[WARNING]" not in line]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-2000:]
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
