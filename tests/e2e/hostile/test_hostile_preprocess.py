"""Hostile inputs, round 2 (issue 24), row 9, through the tool: tools/datasets/preprocess_data.py with a tokenizer
that would silently drop characters refuses in one paragraph before any token is written (the check itself:
tests/hostile/test_hostile_preprocess.py)."""
import subprocess
import sys

from tests.support.hostile import corpus, gpt2_without_bytes  # noqa: F401 (fixtures)
from tests.support.training import REPO_ROOT, child_environment


def test_preprocess_data_refuses_in_one_paragraph(gpt2_without_bytes, corpus, tmp_path):
    done = subprocess.run(
        [sys.executable, "tools/datasets/preprocess_data.py", "--input", corpus, "--output-prefix",
         str(tmp_path / "out"), "--tokenizer-type", "GPT2BPETokenizer", "--vocab-file", gpt2_without_bytes[0],
         "--merge-file", gpt2_without_bytes[1], "--append-eod", "--no-progress"],
        cwd=REPO_ROOT, env=child_environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "cannot encode 254 of the 256 byte values" in errors[0], done.stderr
    assert not list(tmp_path.glob("out*"))
