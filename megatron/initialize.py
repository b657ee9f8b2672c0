"""Start-up of every rank: the process group (gloo on CPU) and the seeds."""
import os
import random
import socket

import numpy as np
import torch
import deepspeed
from deepspeed.accelerator import get_accelerator


def initialize_megatron(neox_args) -> None:
    """Join the process group the launcher describes, or a one-process group when run directly with
    `python train.py`; pick this rank's device and seed every generator."""
    accelerator = get_accelerator()
    backend = "gloo" if accelerator.device_name() == "cpu" else accelerator.communication_backend_name()
    if "RANK" not in os.environ:  # run with plain `python`: what a launcher would have set (DeepSpeed
        # reads these); a free port, so that single-process runs (tests, notebooks) can share a machine
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=str(_free_port()))
    deepspeed.init_distributed(dist_backend=backend, verbose=False)
    neox_args.rank = torch.distributed.get_rank()
    neox_args.world_size = torch.distributed.get_world_size()
    neox_args.local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if accelerator.device_name() != "cpu":
        accelerator.set_device(neox_args.local_rank)
    set_seed(neox_args.seed)


def set_seed(seed: int) -> None:
    """The same seed on every rank: DeepSpeed broadcasts rank 0's weights anyway, and dropout then
    differs between ranks only through their data."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    get_accelerator().manual_seed_all(seed)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
