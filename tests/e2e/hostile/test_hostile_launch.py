"""Hostile inputs, round 2 (issue 24), row 25: a config too long for a command line reaches the ranks
(in a private temporary file on this machine, removed after the launch), and a launch on other machines,
which gets it on the command line only, refuses it in one paragraph instead of "Argument list too long" (that
refusal and the dry run's launcher command, which the config package decides, through deepy.py's main in-process:
tests/hostile/test_hostile_launch.py)."""
import hashlib
import json
import subprocess
import sys

from tests.support.hostile import long_config  # noqa: F401 (fixture)
from tests.support.training import REPO_ROOT, TINY, child_environment, free_port


def deepy(*argv, env=None):
    return subprocess.run([sys.executable, "deepy.py", *map(str, argv)], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=300, env={**child_environment(), **(env or {})})


def test_a_2_mb_value_reaches_every_rank_and_its_file_is_removed(long_config, tmp_path):
    path, value = long_config
    temporary, out = tmp_path / "tmp", tmp_path / "out"
    temporary.mkdir()
    out.mkdir()
    done = deepy("tests/scripts/report_config.py", TINY, path, "--set", "num_gpus=2", "--set",
                 f"master_port={free_port()}", env={"OUT_DIR": str(out), "TMPDIR": str(temporary)})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    expected = {"length": len(value), "sha256": hashlib.sha256(value.encode()).hexdigest(),
                "script": "report_config.py", "main_file": "report_config.py",
                "path0": str(REPO_ROOT / "tests/scripts")}  # as `python tests/scripts/report_config.py` sets it
    assert [json.loads((out / f"rank{r}.json").read_text()) for r in (0, 1)] == [expected, expected]
    assert list(temporary.iterdir()) == []  # the config file's private folder is gone
