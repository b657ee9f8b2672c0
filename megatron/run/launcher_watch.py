"""Ranks that notice their launcher is gone. deepy.py names itself in NEOX_LAUNCHER (host, PID, start
time) for every rank it starts; when that process disappears (`kill -KILL`, a crashed login shell),
DeepSpeed's runner and launcher processes carry on and would keep the ranks training, and writing
checkpoints, as orphans nobody can signal. A watcher thread in each rank sends the rank SIGTERM instead:
training saves a checkpoint and stops as it does for a scheduler's SIGTERM, then the launcher
processes exit with it."""
import os
import signal
import socket
import threading
import time

import psutil

VARIABLE = "NEOX_LAUNCHER"
POLL_SECONDS = 1.0


def launcher_identity() -> str:
    """What deepy.py puts in NEOX_LAUNCHER for its ranks."""
    return f"{socket.gethostname()}:{os.getpid()}:{psutil.Process().create_time()}"


def watch_launcher(say=print) -> threading.Thread | None:
    """Start the watcher when this process was launched by deepy.py on this host (ranks on other hosts
    cannot see the launcher's PID; their launcher processes stop them when the connection drops)."""
    value = os.environ.get(VARIABLE)
    if not value:
        return None
    host, pid, started = value.rsplit(":", 2)
    if host != socket.gethostname():
        return None
    thread = threading.Thread(target=_watch, args=(int(pid), float(started), say), daemon=True,
                              name="launcher-watch")
    thread.start()
    return thread


def _alive(pid: int, started: float) -> bool:
    try:
        process = psutil.Process(pid)
        # Same start time: not a new process that reused the PID; a zombie has exited already.
        return abs(process.create_time() - started) < 1.0 and process.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _watch(pid: int, started: float, say) -> None:
    while _alive(pid, started):
        time.sleep(POLL_SECONDS)
    say(f"the launcher deepy.py (PID {pid}) is gone: stopping as on SIGTERM (save, then exit)", flush=True)
    os.kill(os.getpid(), signal.SIGTERM)
