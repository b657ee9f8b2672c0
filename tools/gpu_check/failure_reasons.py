"""A pytest plugin for the GPU check's tests part (`-p tools.gpu_check.failure_reasons`): each failure's
traceback is written to the log when the failure happens, not in pytest's summary at the end.

The tests part runs under a time limit on a lent machine; a run stopped there never reaches the summary, and
neither a kill nor SIGINT gets pytest-xdist's controller to print it while a worker is busy (tried: it waits
for the worker). A GPU run of 2026-11-27 so reported 22 failures without a reason, and a second start of the
machine went to finding them. Under xdist the hook runs in the controller, which receives every worker's
report with its traceback."""

_config = None

MARKER = "FAILURE REASON"  # how tests_part finds these blocks in the log


def pytest_configure(config):
    global _config
    _config = config


def pytest_runtest_logreport(report):
    if not report.failed or _config is None or hasattr(_config, "workerinput"):  # a worker: the controller writes
        return
    terminal = _config.pluginmanager.get_plugin("terminalreporter")
    if terminal is None:
        return
    terminal.write_line(f"{MARKER} {report.nodeid} ({report.when}):")
    terminal.write_line(report.longreprtext)
    terminal.flush()
