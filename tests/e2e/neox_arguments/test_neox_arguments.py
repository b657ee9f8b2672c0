"""A config mistake through the entry point: `deepy.py train.py BAD --dry-run` prints one paragraph with the
suggestion, not a traceback (the config checks in-process: tests/neox_arguments/test_neox_arguments.py)."""
import subprocess
import sys

from tests.support.config_files import write


def test_entry_point_prints_one_paragraph_not_a_traceback(tmp_path, repo_root):
    bad = write(tmp_path, "train_micro_batch_size_per_gpu: 2\nnum-layer: 3\n", "bad.yml")
    result = subprocess.run([sys.executable, "deepy.py", "train.py", str(bad), "--dry-run"],
                            cwd=repo_root, capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and "Did you mean 'num-layers'?" in result.stderr
