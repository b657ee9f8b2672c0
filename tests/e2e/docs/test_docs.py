"""The docs stay true: docs/config-reference.md is the one generated from the typed config groups; every
relative link of README.md and docs/ (and its #anchor) leads somewhere; README stays a front door."""
import subprocess
import sys


def test_the_config_reference_is_current(repo_root):
    result = subprocess.run([sys.executable, "tools/docs/config_reference.py", "--check"],
                            cwd=repo_root, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


