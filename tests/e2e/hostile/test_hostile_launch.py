"""Hostile inputs, round 2 (issue 24), row 25: a config too long for a command line reaches the ranks
(in a private temporary file on this machine, removed after the launch), and a launch on other machines,
which gets it on the command line only, refuses it in one paragraph instead of "Argument list too long"."""
import base64
import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.support.training import REPO_ROOT, TINY, child_environment, free_port


@pytest.fixture
def long_config(tmp_path):
    """A config file whose one value is 2 MB of incompressible text."""
    value = base64.b64encode(os.urandom(1_500_000)).decode()
    path = tmp_path / "long.yml"
    path.write_text(f'{{"wandb_group": "{value}"}}\n')
    return path, value


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


def test_dry_run_names_the_config_file(long_config):
    done = deepy("train.py", TINY, long_config[0], "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    command = done.stdout.split("# Launcher command\n", 1)[1]
    assert "train.py --megatron_config_file CONFIG_FILE\n# CONFIG_FILE: the merged config" in command
    assert "--megatron_config " not in command  # the config itself is not on the command line


def test_other_machines_get_a_paragraph_not_argument_list_too_long(long_config, tmp_path):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=1\nnode2 slots=1\n")
    done = deepy("train.py", TINY, long_config[0], "--dry-run", "-H", hostfile)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "more than the 131,072 one argument may hold, and ranks on other machines (hostfile or force_multi)" \
        in errors[0] and f"Its longest value is wandb-group (2,000,002 bytes, {long_config[0]}:1)" in errors[0]
