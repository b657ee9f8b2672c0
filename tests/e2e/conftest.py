"""The launch tier is this folder: every test under tests/e2e/ starts processes (the entry points deepy.py,
train.py, evaluate.py, generate.py and eval.py, the tools, a compiler, chattr or mount) or trains through
DeepSpeed's engine, and is marked `launches` here, so `make test-fast` (`-m "not launches"`) leaves it out and no
file marks it by hand (tests/test_architecture_rules.py)."""
import pathlib

import pytest

E2E = pathlib.Path(__file__).parent


def pytest_itemcollected(item):
    # Marked as each test is collected: before `-m` deselects, and before tests/conftest.py orders the work
    # units (those that start processes first). The path check keeps the rule to this folder whichever way
    # pytest routes the hook.
    if item.path.is_relative_to(E2E):
        item.add_marker(pytest.mark.launches)
