"""First contact (issue 23): a fresh clone's first command fails in a second with one paragraph naming
the missing file, the key and line that set it, and the command that creates it, before any rank
starts; a rank's own config mistake reaches the user without DeepSpeed's launcher noise."""
import subprocess
import sys
import time

import pytest

from tests.support.training import KERPLE_LOG, REPO_ROOT, TINY, child_environment, free_port


def test_fresh_clone_command_fails_in_seconds_with_one_paragraph(tmp_path):
    """`python deepy.py train.py configs/kerple_log.yml` where nothing was prepared (run from an empty
    folder: every relative path of the config is missing there)."""
    began = time.monotonic()
    result = subprocess.run([sys.executable, str(REPO_ROOT / "deepy.py"), str(REPO_ROOT / "train.py"), str(KERPLE_LOG)],
                            cwd=tmp_path, env=child_environment(), capture_output=True, text=True, timeout=120)
    seconds = time.monotonic() - began
    assert result.returncode == 2, result.stdout + result.stderr
    assert seconds < 15, f"took {seconds:.1f} s"
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: this run reads files that do not exist"), result.stderr
    assert "data-path data/github/github_text_document" in lines[0] and "local_setup.yml:4" in lines[0]
    assert "python tools/datasets/prepare_data.py github" in lines[0]
    output = result.stdout + result.stderr
    assert "Traceback" not in output and "sigkill_handler" not in output and "launcher" not in output
    assert not (tmp_path / "checkpoints").exists()  # nothing was started, nothing written


# ---------------------------------------------------------------------------- launcher's own noise
@pytest.mark.parametrize("failure", ["mistake", "killed"])
def test_a_failing_rank_is_reported_without_the_launchers_config_blob(failure):
    result = subprocess.run([sys.executable, "deepy.py", "tests/scripts/failing_rank.py", str(TINY),
                             "--set", "num_gpus=1", "--set", f"master_port={free_port()}"],
                            cwd=REPO_ROOT, env={**child_environment(), "RANK_FAILURE": failure},
                            capture_output=True, text=True, timeout=300)
    output = result.stdout + result.stderr
    assert "sigkill_handler" not in output and "--megatron_config" not in output and "Traceback" not in output
    if failure == "mistake":  # the rank's paragraph is the whole story
        assert result.returncode == 2, output
        assert result.stderr.strip() == "error: configs/tiny.yml:3: made-up-key: a config mistake only a rank can see."
    else:
        assert result.returncode == 247, output  # DeepSpeed's launcher: 256 - 9
        assert result.stderr.strip().endswith("deepy.py: a rank stopped with status 247 (a rank killed by SIGKILL, "
                                              "often the out-of-memory killer); its own messages are above.")
