"""How an entry point's process ends: as Python ends it, minus the last step.

Python's exit joins the threads that are not daemons, runs the atexit handlers (logging's flush, W&B's
finish, multiprocessing's and DeepSpeed's clean-up), flushes the standard streams, and then frees every
object of every module, running its garbage collector over the million objects of torch, its compiler and
DeepSpeed: 0.5-1 s of CPU per process on a CPU machine, and a launch through deepy.py is three processes.
`leave` does the first three steps and then ends the process. Nothing is lost by skipping the last one: files
are closed by the code that writes them, and a run's other processes have been waited for by then.
(Freezing the garbage collector instead would be as quick, but the objects it then never frees make Triton's
bindings print a list of "leaked" ones at every exit.)"""
import atexit
import ctypes
import os
import sys
import threading


def leave(code: int | None) -> None:
    """End this process with the status `sys.exit(code)` would give (None: 0), once its threads, atexit handlers
    and output are done."""
    # Python's own first step: the threading module's exit callbacks (concurrent.futures' wakes its pools' idle
    # workers, which are not daemons: inductor's compile pool, after a `flex` evaluation, waited forever for a
    # job), then the join of every thread that is not a daemon.
    threading._shutdown()
    atexit._run_exitfuncs()  # what Python calls at exit; a handler's error is printed and the rest still run
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe or stream: nothing more can reach it
            pass
    # And C's own buffered streams, which exit() would flush and os._exit does not: what libraries print from C or
    # C++ (NCCL_DEBUG's lines, for one) into a log file or a pipe.
    ctypes.CDLL(None).fflush(None)
    os._exit(0 if code is None else int(code))
