"""How many threads torch uses on CPU, chosen once per process by the entry points (train.py,
evaluate.py, generate.py, eval.py).

torch's default is one thread per core. On a machine other work keeps busy, those threads wait on each
other at every parallel region and a run slows down by 4-16x; one thread per process does not collapse
(docs/performance.md, "Threads on a busy CPU", measured with benchmarks/cpu_threads.py). So:

- an OMP_NUM_THREADS you set is kept as it is (torch reads it itself);
- otherwise each process takes its share of the cores (cores / processes on this machine, at most
  torch's default), and only one thread when the machine is already busy: the load average of the last
  minute at or above the number of cores. That choice is said once, in one line, with the setting to
  change it.

On a machine with CUDA nothing changes: the threads there only feed the GPU.
"""
import os
import sys

import torch

SETTING = "OMP_NUM_THREADS"


def chosen_threads(cores: int, processes: int, load: float, default: int) -> int:
    """The thread count for one of `processes` processes on `cores` cores at this `load` (the 1-minute
    load average, other work's and this machine's), never more than torch's `default`."""
    if load >= cores:
        return 1
    return max(1, min(default, cores // max(processes, 1)))


def choose_cpu_threads(rank: int = 0) -> int | None:
    """Set torch's thread count by the rule above; returns it, or None when it was left alone."""
    if os.environ.get(SETTING) or torch.cuda.is_available():
        return None
    cores = os.cpu_count() or 1
    processes = int(os.environ.get("LOCAL_WORLD_SIZE", "1") or 1)
    try:
        load = os.getloadavg()[0]
    except OSError:  # no load average on this platform: take the share of the cores
        load = 0.0
    threads = chosen_threads(cores, processes, load, torch.get_num_threads())
    if threads != torch.get_num_threads():
        torch.set_num_threads(threads)
        if load >= cores and rank == 0:
            print(f"note: the machine is busy (load {load:.1f} on {cores} cores), so torch uses {threads} thread per "
                  f"process (more would wait on each other); set {SETTING}=N to choose.", file=sys.stderr)
    return threads
