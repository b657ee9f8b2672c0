"""Shared fixtures. Tests needing ../shared skip with a reason when it is absent (a user's clone)."""
import contextlib
import os
import pathlib
import subprocess

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DIR = pathlib.Path(os.environ.get("NEOX_SHARED_DIR", REPO_ROOT.parent / "shared"))
# The processes tests start take one torch thread each unless the run says otherwise: the entry points'
# own rule (megatron/cpu_threads.py) reads the machine's load, so its one-line note would come and go
# with other work; tests/test_cpu_threads.py checks the rule itself.
os.environ.setdefault("OMP_NUM_THREADS", "1")


@contextlib.contextmanager
def _no_process_unless_marked(item):
    """A test that starts a process (an entry point, a launcher, a compiler) must be marked `launches`
    (or `slow`, or `cuda`): the fast tier (`make test-fast`) is defined as the tests that do not, so an unmarked
    launch fails the test, in its fixtures too (a module fixture that trains is set up by its first test)."""
    # `cuda` tests run on a GPU only (never in the fast tier), where every compiled kernel starts its compiler
    # (Triton's ptxas, inductor's compile workers) as a process.
    if item.get_closest_marker("launches") or item.get_closest_marker("slow") or item.get_closest_marker("cuda"):
        yield
        return
    original = subprocess.Popen._execute_child

    def refuse(self, args, *rest, **kwargs):
        raise AssertionError(f"{item.nodeid} starts a process ({str(args)[:200]}) but is not marked "
                             "`launches`: mark it (pytestmark or @pytest.mark.launches) so `make test-fast` skips it")
    subprocess.Popen._execute_child = refuse
    try:
        yield
    finally:
        subprocess.Popen._execute_child = original


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item):
    with _no_process_unless_marked(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    with _no_process_unless_marked(item):
        return (yield)


@pytest.fixture
def shared_dir() -> pathlib.Path:
    if not (SHARED_DIR / "data").is_dir():
        pytest.skip(f"needs the project's shared data folder at {SHARED_DIR} (only in the team's checkout and CI)")
    return SHARED_DIR


@pytest.fixture
def repo_root() -> pathlib.Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def stdlib_data(tmp_path_factory) -> str:
    """~3 MB of the built-in corpus (the CPython standard library, byte-level tokens) as a NeoX
    dataset, built once per test session; returns its prefix."""
    from megatron.data.preprocess import preprocess
    from megatron.data.stdlib_corpus import write_stdlib_corpus
    from megatron.tokenizer import make_tokenizer

    folder = tmp_path_factory.mktemp("stdlib")
    write_stdlib_corpus(str(folder / "stdlib.jsonl.zst"), max_bytes=3_000_000)
    preprocess([str(folder / "stdlib.jsonl.zst")], str(folder / "stdlib"),
               make_tokenizer("ByteLevelTokenizer", None, None), append_eod=True, show_progress=False)
    return str(folder / "stdlib_text_document")


def pytest_terminal_summary(terminalreporter):
    # Say which CPU code path the compiled kernels took, so a log shows what was actually checked.
    import torch
    ran = sum(len(terminalreporter.stats.get(outcome, [])) for outcome in ("passed", "failed", "error"))
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    terminalreporter.write_line(
        f"{ran} tests ran on torch's {torch.backends.cpu.get_cpu_capability()} CPU code path"
        + (f" (forced by ATEN_CPU_CAPABILITY={forced})" if forced else ""))
