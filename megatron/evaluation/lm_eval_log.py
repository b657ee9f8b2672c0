"""lm-eval's own output -- its log lines, progress bars, `datasets`' messages, the stderr of the git it calls
for its version -- kept in a file beside the result file instead of on the terminal, where it buried the
table (RULER printed ~20 such lines a task). eval.py prints the file's path; this project's own lines
(the tables, what could not be scored and why) stay on stdout.

Redirected at the file descriptor, not sys.stderr: the git child process and any C library write to fd 2
directly. Appended, with a header per run, so an earlier run's log is kept."""
import contextlib
import datetime
import os
import pathlib
import sys


@contextlib.contextmanager
def lm_eval_output_to(path: pathlib.Path, what: str):
    """Everything written to stderr inside the block goes to `path` (`what`: the header's words); its path is
    printed at the end, an error's included (the error itself is printed after, on the terminal)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    sys.stderr.flush()
    with open(path, "a") as log:
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        log.write(f"--- {now} {what}\n")
        log.flush()
        saved = os.dup(2)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            print(f"lm-eval's own output (its log, progress bars, warnings): {path}", flush=True)
