"""Shared fixtures. Tests needing ../shared skip with a reason when it is absent (a user's clone)."""
import os
import pathlib

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DIR = pathlib.Path(os.environ.get("NEOX_SHARED_DIR", REPO_ROOT.parent / "shared"))


@pytest.fixture
def shared_dir() -> pathlib.Path:
    if not (SHARED_DIR / "data").is_dir():
        pytest.skip(f"needs the project's shared data folder at {SHARED_DIR} (only in the team's checkout and CI)")
    return SHARED_DIR


@pytest.fixture
def repo_root() -> pathlib.Path:
    return REPO_ROOT
