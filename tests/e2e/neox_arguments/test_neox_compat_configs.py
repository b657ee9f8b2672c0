"""Upstream GPT-NeoX and KERPLE-fork configs run unmodified (tests/fixtures/neox: their keys and values,
their style): every upstream key is implemented, mapped, accepted with one start-up note, or refused
with a message; the generated key page is current; a tiny run starts from each config."""
import subprocess
import sys

from tests.support.training import REPO_ROOT


def test_upstream_key_page_is_current():
    done = subprocess.run([sys.executable, "tools/docs/upstream_keys_page.py", "--check"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    page = (REPO_ROOT / "docs" / "upstream-keys.md").read_text()
    assert "| `save-interval` | fork | `None` | mapped |" in page
    assert "docs/upstream-keys.md" in (REPO_ROOT / "README.md").read_text()


