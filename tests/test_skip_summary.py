"""The test summary's skip lines (tests/support/skip_summary.py, called by conftest.py): counted by reason, most first,
with the share that are cases of a parametrised matrix; run on a small suite of known skips."""
pytest_plugins = ["pytester"]

CONFTEST = """
from tests.support.skip_summary import skip_lines

def pytest_terminal_summary(terminalreporter):
    for line in skip_lines(terminalreporter.stats.get("skipped", [])):
        terminalreporter.write_line(line)
"""
SUITE = """
import pytest

@pytest.mark.parametrize("n", range(5))
def test_matrix(n):
    if n < 3:
        pytest.skip("this strategy does not handle that method")

@pytest.mark.skipif(True, reason="needs a CUDA device")
def test_cuda():
    pass

@pytest.mark.xfail(reason="expected to fail: not a skip")
def test_expected_failure():
    assert False
"""


def test_skips_are_counted_by_reason_and_matrix_cases_named(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2, skipped=4, xfailed=1)
    lines = result.stdout.lines
    start = lines.index("4 tests skipped (3 of them cases of a parametrised matrix that do not apply to that case), "
                        "by reason:")
    assert lines[start + 1:start + 3] == ["  3  this strategy does not handle that method",
                                          "  1  needs a CUDA device"]


def test_a_run_without_skips_says_nothing_of_them(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite="def test_one():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert not [line for line in result.stdout.lines if "skipped" in line and "by reason" in line]
