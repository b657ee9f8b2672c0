"""What memory this process's device has free, for the checks made before a large allocation
(megatron/run/preflight.py for training and evaluation, megatron/text_generation/memory.py for generation).
A leaf module: it imports nothing of the project, so generation's check does not pull the config package
into every importer of megatron.text_generation (which the config package itself imports, through the
evaluation modes)."""
import psutil
import torch


def available_bytes() -> tuple[int, str]:
    from deepspeed.accelerator import get_accelerator  # here: the preprocessing tool imports preflight too
    accelerator = get_accelerator()
    if accelerator.device_name() == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return free, "free on the GPU"
    return psutil.virtual_memory().available, "of available memory"
