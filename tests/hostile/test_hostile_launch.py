"""Hostile inputs, round 2 (issue 24), row 25, in this process through deepy.py's own main: a config too long for a
command line goes to the ranks in a file (the dry run's launcher command says so), and a launch on other machines,
which gets it on the command line only, refuses it in one paragraph instead of "Argument list too long". The launch
that carries the 2 MB value to every rank: tests/e2e/hostile/test_hostile_launch.py."""
from tests.support.hostile import entry_point_in_process, long_config  # noqa: F401 (fixture)
from tests.support.training import TINY


def test_dry_run_names_the_config_file(long_config, monkeypatch, capsys):
    done = entry_point_in_process(monkeypatch, capsys, "deepy.py", "train.py", TINY, long_config[0], "--dry-run")
    assert done.returncode == 0, done.stderr[-3000:]
    command = done.stdout.split("# Launcher command\n", 1)[1]
    assert "train.py --megatron_config_file CONFIG_FILE\n# CONFIG_FILE: the merged config" in command
    assert "--megatron_config " not in command  # the config itself is not on the command line


def test_other_machines_get_a_paragraph_not_argument_list_too_long(long_config, tmp_path, monkeypatch, capsys):
    hostfile = tmp_path / "hosts"
    hostfile.write_text("node1 slots=1\nnode2 slots=1\n")
    done = entry_point_in_process(monkeypatch, capsys, "deepy.py", "train.py", TINY, long_config[0], "--dry-run",
                                  "-H", hostfile)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, done.stderr[-3000:]
    assert "more than the 131,072 one argument may hold, and ranks on other machines (hostfile or force_multi)" \
        in errors[0] and f"Its longest value is wandb-group (2,000,002 bytes, {long_config[0]}:1)" in errors[0]
