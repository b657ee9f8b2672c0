"""A failed run's report names the reason its ranks printed, not only the log's last lines (the sweep stopped by
the user or killed outright: tests/e2e/reproduce/test_reproduce_signals.py)."""
from tools.reproduce.execute import failure_summary


def test_failure_summary_shows_the_error_before_an_orphans_step_lines(tmp_path):
    log = tmp_path / "train.log"
    text = "\n".join(["[INFO] [launch.py:1] starting", "error: save folder /w/checkpoints is in use by PID 123 "
                      "(it holds /w/checkpoints/.lock). Two runs must not write one folder: give this run another "
                      "`save`, or stop PID 123.", "deepy.py: a rank stopped with status 2; its own messages are above."]
                     + [f"step {i}/100000 | loss 2.5 | 0.1 s" for i in range(300)])
    summary = failure_summary(text, log)
    assert summary.index("error: save folder /w/checkpoints is in use by PID 123") < summary.index("step 299/")
    assert summary.startswith("its error:\n    error: save folder") and f"last lines of {log}:" in summary
    assert "[INFO]" not in summary and "step 293/" not in summary  # the tail is still the last lines only
    assert failure_summary("step 1/2\nTraceback\nValueError: x", log) == f"last lines of {log}:\n" + \
        "    step 1/2\n    Traceback\n    ValueError: x"
