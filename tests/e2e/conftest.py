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


def trained_once(name: str, stdlib_data: str, tmp_path_factory, worker_id: str, **overrides) -> pathlib.Path:
    """The save folder of configs/tiny.yml trained by train.py on the `stdlib_data` slice with `overrides` (`--set`
    flags), once per test run: under pytest-xdist the first worker to need it trains while another waits on a lock,
    as the docs' demo is built. For tests that evaluate, score or export *a* freshly trained model, since a train.py
    start is most of such a test's time; they only read it (one whose point is the training, or that writes into
    the save folder, trains its own or copies it)."""
    from filelock import FileLock
    from tests.support.training import TINY, run_script, set_flags, tiny_overrides

    def train(folder: pathlib.Path) -> pathlib.Path:
        values = tiny_overrides(stdlib_data, folder, eval_iters=0, **overrides)
        done = run_script(["train.py", str(TINY), *set_flags(values)], timeout=600)
        assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
        assert (folder / "ckpt" / "latest").read_text() == f"global_step{values['train_iters']}"
        return folder / "ckpt"

    if worker_id == "master":
        return train(tmp_path_factory.mktemp(name))
    shared = tmp_path_factory.getbasetemp().parent / name
    with FileLock(f"{shared}.lock"):
        if not (shared / "built").is_file():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            train(shared)
            (shared / "built").touch()
    return shared / "ckpt"


@pytest.fixture(scope="session")
def trained_tiny(stdlib_data, tmp_path_factory, worker_id) -> pathlib.Path:
    """configs/tiny.yml as it is (kerple_log), 4 steps."""
    return trained_once("trained-tiny", stdlib_data, tmp_path_factory, worker_id, train_iters=4, checkpoint_factor=4)


@pytest.fixture(scope="session")
def trained_tiny_alibi(stdlib_data, tmp_path_factory, worker_id) -> pathlib.Path:
    """configs/tiny.yml (which says kerple_log) with `--set pos-emb=alibi`, 2 steps: a model rebuilt from anything
    but the checkpoint would be the wrong method."""
    return trained_once("trained-tiny-alibi", stdlib_data, tmp_path_factory, worker_id, train_iters=2,
                        checkpoint_factor=2, pos_emb="alibi")
