"""What memory this process's device has free, for the checks made before a large allocation
(megatron/run/preflight.py for training and evaluation, megatron/text_generation/memory.py for generation),
and the peak memory of a block of code, for the benchmarks and the GPU check.
A leaf module: it imports nothing of the project, so generation's check does not pull the config package
into every importer of megatron.text_generation (which the config package itself imports, through the
evaluation modes)."""
import pathlib

import psutil
import torch


def available_bytes() -> tuple[int, str]:
    from deepspeed.accelerator import get_accelerator  # here: the preprocessing tool imports preflight too
    accelerator = get_accelerator()
    if accelerator.device_name() == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return free, "free on the GPU"
    return psutil.virtual_memory().available, "of available memory"


def read_status_kb(field: str) -> int:
    for line in pathlib.Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


class PeakMemory:
    """Peak memory (MB) of the block that runs inside it, above what was allocated when it began:
    CUDA's max allocated, or on CPU the rise of the process's peak RSS (Linux VmHWM, reset on entry).

    On CPU, run with MALLOC_MMAP_THRESHOLD_=65536 so that glibc hands large blocks back to the OS
    when they are freed: otherwise memory freed before the block is reused without raising the RSS."""

    def __init__(self, device):
        self.device = device

    def __enter__(self):
        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
            self.base = torch.cuda.memory_allocated()
        else:
            pathlib.Path("/proc/self/clear_refs").write_text("5")  # reset the peak RSS to the current RSS
            self.base = read_status_kb("VmRSS") * 1024
        return self

    def __exit__(self, *exc):
        if self.device == "cuda":
            torch.cuda.synchronize()
            self.peak_mb = (torch.cuda.max_memory_allocated() - self.base) / 2**20
        else:
            self.peak_mb = (read_status_kb("VmHWM") * 1024 - self.base) / 2**20
