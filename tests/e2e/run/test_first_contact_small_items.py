"""Issue 23's smaller first-contact items: no DeepSpeed accelerator warning on a machine without one,
`log-dir` keeps each process's output, probes time their lengths, `--set save-interval` beats a file's
checkpoint-factor, Megatron-LM spellings get the right did-you-mean, the paper's numbers are written like
ours, and a config mistake is printed by rank 0 only."""
import subprocess
import sys

import pytest
import torch

from megatron.neox_arguments.log_files import log_file_names
from tests.support.training import REPO_ROOT, TINY, child_environment

WARNING = "Setting accelerator to CPU"
@pytest.mark.skipif(torch.cuda.is_available(), reason="the warning is about machines without an accelerator")
def test_training_prints_no_accelerator_warning_and_log_dir_keeps_the_output(tmp_path, stdlib_data):
    env = {k: v for k, v in child_environment().items() if k != "DS_ACCELERATOR"}
    done = subprocess.run([sys.executable, "train.py", str(TINY), "--set", "train-iters=2",
                           "--set", f"data-path={stdlib_data}", "--set", f"save={tmp_path / 'ckpt'}",
                           "--set", f"load={tmp_path / 'ckpt'}", "--set", f"log-dir={tmp_path / 'logs'}"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert WARNING not in done.stdout + done.stderr
    stdout, stderr = (open(name).read() for name in log_file_names(str(tmp_path / "logs"), 0))
    assert "test at step 2" in done.stdout and "test at step 2" in stdout
    assert stderr == done.stderr


