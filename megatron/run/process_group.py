"""The processes of one process group that are still running: what deepy.py waits for after its launch,
and what the GPU check waits to be gone after it kills a part (tools/gpu_check/processes.py)."""
import os

import psutil


def living_members(group: int) -> list:
    """The psutil processes (with `status` and `cmdline` in their .info) of process group `group` that have not
    ended. A zombie has ended: it only awaits its reaping."""
    members = []
    for process in psutil.process_iter(["status", "cmdline"]):
        try:
            if os.getpgid(process.pid) == group and process.info["status"] not in (psutil.STATUS_ZOMBIE,
                                                                                  psutil.STATUS_DEAD):
                members.append(process)
        except (ProcessLookupError, PermissionError):
            continue
    return members
