"""tools/datasets/prepare_data.py where it starts a process: its command line as a user runs it, an unwritable
data folder (chattr, for root) and a disk that fills up while extracting (a mounted tmpfs). The hub it downloads
from is the local stand-in of tests/support/hub.py; the rest of its tests: tests/data/test_prepare_data.py."""
import contextlib
import hashlib

import pytest

from megatron.data import DataError
from tests.support.data import tool  # noqa: F401 (the fixture: prepare_data.py as a module)
from tests.support.hub import hub, jsonl_zst, tiny_gpt2  # noqa: F401 (hub and tiny_gpt2: fixtures)


def test_the_command_line_lists_the_datasets_and_says_a_mistake_in_one_paragraph(repo_root, tmp_path):
    """The command preflight names, run as a user runs it (from another folder too)."""
    import subprocess
    import sys

    command = [sys.executable, str(repo_root / "tools/datasets/prepare_data.py")]
    listing = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert listing.returncode == 0 and "openwebtext2" in listing.stdout and "SUBSTITUTE" in listing.stdout
    mistake = subprocess.run(command + ["gitlab"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert mistake.returncode == 2 and mistake.stdout == ""
    assert mistake.stderr.startswith("error: unknown dataset 'gitlab'") and mistake.stderr.count("\n") == 1
    assert not any(tmp_path.iterdir())


# Starts chattr, for root.
def test_an_unwritable_data_dir_is_said_at_once_not_retried(tmp_path, tool, hub, tiny_gpt2):
    from tests.support.hostile import unwritable_folder
    server, _ = hub
    server.files.update(tiny_gpt2)
    with contextlib.contextmanager(unwritable_folder.__wrapped__)(tmp_path) as locked:
        with pytest.raises(DataError, match=f"cannot write {locked}.*Give --data-dir / --output-dir a folder "
                                            "this process can write to"):
            tool.main(["gpt2", "--data-dir", str(locked / "data"), "--no-progress"])
    assert server.requests == []


# Starts mount.
def test_a_disk_that_fills_up_while_extracting_is_one_paragraph(tmp_path, tool, hub, tiny_gpt2):
    """A real full disk (a 3 MB tmpfs): the download fits, the extracted copy does not."""
    from tests.support.hostile import full_disk
    server, url = hub
    server.files.update(tiny_gpt2)
    words = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(60_000)]  # ~1.7 MB compressed
    server.files["/pile/00.jsonl.zst"] = jsonl_zst([{"text": " ".join(words[i:i + 100]), "meta": {"pile_set_name":
                                                    "ArXiv"}} for i in range(0, len(words), 100)])
    with contextlib.contextmanager(full_disk.__wrapped__)(tmp_path) as disk:
        with pytest.raises(DataError, match=r"no space left on the device writing .*The downloads are kept; what "
                                            r"was being extracted or tokenized was removed"):
            tool.main(["arxiv", "--data-dir", str(disk), "--source", f"arxiv={url}/pile/00.jsonl.zst",
                       "--no-progress", "--workers", "1"])
        assert (disk / "arxiv/download/00.jsonl.zst").is_file()
        assert not (disk / "arxiv/arxiv.jsonl.zst").exists() and not list(disk.rglob("*.partial"))
