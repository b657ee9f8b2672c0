"""The launch tier is this folder: every test under tests/e2e/ starts processes (the entry points deepy.py,
train.py, evaluate.py, generate.py and eval.py, the tools, a compiler, chattr or mount) or trains through
DeepSpeed's engine, and is marked `launches` here, so `make test-fast` (`-m "not launches"`) leaves it out and no
file marks it by hand (tests/test_architecture_rules.py)."""
import pathlib
import shutil

import pytest

E2E = pathlib.Path(__file__).parent


def pytest_itemcollected(item):
    # Marked as each test is collected: before `-m` deselects, and before tests/conftest.py orders the work
    # units (those that start processes first). The path check keeps the rule to this folder whichever way
    # pytest routes the hook.
    if item.path.is_relative_to(E2E):
        item.add_marker(pytest.mark.launches)


@pytest.fixture(scope="session")
def trained_tiny(stdlib_data, tmp_path_factory, worker_id) -> pathlib.Path:
    """The save folder of configs/tiny.yml (kerple_log) trained 4 steps by train.py on the `stdlib_data` slice, for
    the tests that evaluate, score or export *a* freshly trained model: trained once per test run (under
    pytest-xdist the first worker to need it trains while another waits on a lock), not once per test, since a
    train.py start is most of such a test's time. Tests only read it; one whose point is the training itself, or
    that writes into the save folder, trains its own."""
    from filelock import FileLock
    from tests.support.training import TINY, run_script, set_flags, tiny_overrides

    def train(folder: pathlib.Path) -> pathlib.Path:
        overrides = tiny_overrides(stdlib_data, folder, train_iters=4, eval_iters=0, checkpoint_factor=4)
        done = run_script(["train.py", str(TINY), *set_flags(overrides)], timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        return folder / "ckpt"

    if worker_id == "master":
        return train(tmp_path_factory.mktemp("trained_tiny"))
    shared = tmp_path_factory.getbasetemp().parent / "trained-tiny"
    with FileLock(f"{shared}.lock"):
        if not (shared / "built").is_file():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            train(shared)
            (shared / "built").touch()
    return shared / "ckpt"
