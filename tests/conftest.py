"""Shared fixtures. Tests needing ../shared skip with a reason when it is absent (a user's clone)."""
import contextlib
import os
import pathlib
import subprocess

import pytest

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DIR = pathlib.Path(os.environ.get("NEOX_SHARED_DIR", REPO_ROOT.parent / "shared"))
# The processes tests start take one torch thread each unless the run says otherwise: the entry points'
# own rule (megatron/run/cpu_threads.py) reads the machine's load, so its one-line note would come and go
# with other work; tests/run/test_cpu_threads.py checks the rule itself.
os.environ.setdefault("OMP_NUM_THREADS", "1")


def _import_triton_for_its_interpreter():
    """Triton reads TRITON_INTERPRET once, when it is imported (torch's compiler imports it too): on a machine
    without CUDA, import it here under its interpreter, before any test can, so the `triton` attention kernel's
    tests (which set the variable while they run) can run it on CPU tensors. The variable is not left set: the
    processes tests start see the environment they always did."""
    import importlib.util
    import sys
    if importlib.util.find_spec("triton") is None or "triton" in sys.modules:
        return
    import torch
    if torch.cuda.is_available():
        return
    previous = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        import triton.language  # noqa: F401
    finally:
        if previous is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = previous


_import_triton_for_its_interpreter()


@contextlib.contextmanager
def _no_process_unless_marked(item):
    """A test that starts a process (an entry point, a launcher, a compiler) must be marked `launches`, which
    tests/e2e/conftest.py does for every test under tests/e2e/ (or `slow`, or `cuda`): the fast tier (`make
    test-fast`) is defined as the tests that are not, so a launch elsewhere fails the test, in its fixtures too (a
    module fixture that trains is set up by its first test)."""
    # `cuda` tests run on a GPU only (never in the fast tier), where every compiled kernel starts its compiler
    # (Triton's ptxas, inductor's compile workers) as a process.
    if item.get_closest_marker("launches") or item.get_closest_marker("slow") or item.get_closest_marker("cuda"):
        yield
        return
    original = subprocess.Popen._execute_child

    def refuse(self, args, *rest, **kwargs):
        raise AssertionError(f"{item.nodeid} starts a process ({str(args)[:200]}) but is not under tests/e2e/, "
                             "the launch tier: move it to the path there that mirrors its file (shared helpers to "
                             "tests/support/), so `make test-fast` leaves it out")
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


# The work units that take longest, longest first, each a test file or an xdist group. Started last (xdist's
# default orders units by their number of tests), one of them kept one worker busy for minutes after the other
# had finished. The docs' pages are one group each (tests/e2e/docs/test_docs_commands.py): the README's, whose
# demo the other pages start from, goes first; the GPU check's file (which needs no demo) beside it while the demo
# is built; then the rest by their time ("docs:" stands for every page not named before it). Their seconds in a
# whole `make test` run with --durations=0 (2026-11-29, 2 cores, 736 s in all): the GPU check 131, sequence
# parallelism 82, flex 68, hostile round 3 55, the RULER sweep 50, the README's demo 46, ruler.md 45, extensions
# 37, length-schedules.md 36, the published reports 34, the sweep 33, comparing-variants.md 31, test_deepy 30, the
# example study 26. A worker takes its next unit while it still has two tests to run, so the order says roughly
# who starts what; every other unit that starts processes follows, then the in-process ones.
LONGEST = ("docs:README.md", "tests/e2e/tools/test_gpu_check.py", "tests/e2e/model/test_sequence_parallel_training.py",
           "tests/e2e/model/attention/test_flex_cpu_end_to_end.py", "tests/e2e/hostile/test_hostile_round3.py",
           "tests/e2e/reproduce/test_reproduce_ruler.py", "docs:docs/ruler.md",
           "tests/e2e/reproduce/test_reproduce_extensions.py", "docs:docs/length-schedules.md",
           "tests/e2e/reproduce/test_reproduce_report.py", "tests/e2e/reproduce/test_reproduce.py",
           "docs:docs/comparing-variants.md", "tests/e2e/run/test_deepy.py",
           "tests/e2e/reproduce/test_study_example.py", "docs:")


# Tests whose every case is a work unit of its own, named by a prefix and the case's id: the docs' pages (one case
# per page, each a minute or more of commands).
UNIT_PER_CASE = {"tests/e2e/docs/test_docs_commands.py::test_documented_commands_work_as_written": "docs:"}


def work_unit(nodeid: str) -> str:
    """The unit of work `make test` gives one worker whole: the test's file, so a file's module fixtures (a training,
    a compiled kernel) are set up by one worker once, as under `--dist loadfile`; or one case of UNIT_PER_CASE.
    From the test's id alone: xdist's scheduler, in the process that starts the workers, sees ids, not markers."""
    test, _, case = nodeid.partition("[")
    if case and test in UNIT_PER_CASE:
        return UNIT_PER_CASE[test] + case[:-1]
    return nodeid.split("::")[0]


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist's
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadgroup` (`make test`) with work_unit's units. pytest-xdist 3.8 puts a test's xdist_group into its
    id (item._nodeid), which pytest 9 no longer reads (Node.nodeid comes from item._id): every test was a unit of its
    own, a file's tests ran on both workers and its module fixtures were built on each (the last CI built the
    published reports' 37 s re-rendering twice)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class WorkUnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)
    return WorkUnitScheduling(config, log)


def pytest_collection_modifyitems(config, items):
    """Units run in the order a 2-worker run finishes soonest (`make test` passes --no-loadscope-reorder, so xdist
    keeps it): LONGEST, then the other units that start processes (`launches`: seconds a test), then the rest. A
    stable sort on whole units: a unit's tests stay together, in their order."""
    units = {item: work_unit(item.nodeid) for item in items}
    launching = {unit for item, unit in units.items() if item.get_closest_marker("launches")}

    def rank(item):
        unit = units[item]
        for i, name in enumerate(LONGEST):
            if unit == name or (name.endswith(":") and unit.startswith(name)):
                return i
        return len(LONGEST) + (0 if unit in launching else 1)
    items.sort(key=rank)


def pytest_terminal_summary(terminalreporter):
    # Why tests were skipped, counted by reason (tests/support/skip_summary.py), then which CPU code path the compiled
    # kernels took, so a log shows what was actually checked.
    import torch
    from tests.support.skip_summary import skip_lines
    for line in skip_lines(terminalreporter.stats.get("skipped", [])):
        terminalreporter.write_line(line)
    ran = sum(len(terminalreporter.stats.get(outcome, [])) for outcome in ("passed", "failed", "error"))
    forced = os.environ.get("ATEN_CPU_CAPABILITY")
    terminalreporter.write_line(
        f"{ran} tests ran on torch's {torch.backends.cpu.get_cpu_capability()} CPU code path"
        + (f" (forced by ATEN_CPU_CAPABILITY={forced})" if forced else ""))
