"""How an entry point's process ends (megatron/run/process_exit.py): as Python ends it up to its teardown, so a
thread pool that ran a job (inductor's compile pool after a `flex` evaluation) does not keep it waiting."""
import subprocess
import sys

from tests.support.training import REPO_ROOT

CHILD = ("import atexit; from concurrent.futures import ThreadPoolExecutor; "
         "from megatron.run.process_exit import leave; "
         "atexit.register(print, 'atexit handler ran'); "
         "pool = ThreadPoolExecutor(1); print(pool.submit(sum, [1, 2]).result()); leave(3)")


def test_a_process_with_an_idle_thread_pool_ends_with_its_status_after_its_atexit_handlers():
    done = subprocess.run([sys.executable, "-c", CHILD], cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 3 and done.stdout.splitlines() == ["3", "atexit handler ran"], done.stdout + done.stderr
