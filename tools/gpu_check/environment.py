"""The machine and the versions each import actually found, as JSON (run in the check's environment)."""
import json
import platform
import subprocess
import sys
from importlib import metadata

PACKAGES = ("torch", "deepspeed", "megatron-core", "transformers", "tokenizers", "numpy", "triton", "pydantic",
            "lm-dataformat", "zstandard")


def describe() -> dict:
    import torch
    info = {"python": platform.python_version(), "executable": sys.executable, "platform": platform.platform(),
            "versions": {}, "cuda_available": torch.cuda.is_available()}
    for name in PACKAGES:
        try:
            info["versions"][name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info["versions"][name] = None
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        info.update(gpu=props.name, gpu_memory_gib=round(props.total_memory / 2**30, 1),
                    compute_capability=f"{props.major}.{props.minor}", gpus=torch.cuda.device_count(),
                    cuda=torch.version.cuda, cudnn=torch.backends.cudnn.version())
        try:
            info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                            capture_output=True, text=True, timeout=20).stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            info["driver"] = None
    from deepspeed.accelerator import get_accelerator
    info["deepspeed_accelerator"] = get_accelerator().device_name()
    return info


if __name__ == "__main__":
    print(json.dumps(describe()))
