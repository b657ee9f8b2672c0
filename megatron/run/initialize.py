"""Start-up of every rank: the process group (gloo on CPU) and the seeds."""
import atexit
import os
import random

import numpy as np
import torch
import deepspeed
from deepspeed.accelerator import get_accelerator

from megatron.compiled_code import keep_compiled_code_apart


def join_process_group(seed: int) -> tuple[int, int, int]:
    """Join the process group the launcher describes, or a one-process group when run directly with
    `python train.py`; pick this rank's device and seed every generator with `seed`. Returns (rank, world size,
    local rank); a run's config learns them through NeoXArgs.join_process_group."""
    keep_compiled_code_apart()  # before DeepSpeed JIT-builds its CPU comm op
    accelerator = get_accelerator()
    backend = "gloo" if accelerator.device_name() == "cpu" else accelerator.communication_backend_name()
    if int(os.environ.get("WORLD_SIZE", 1)) == 1:
        skip_shared_memory_comm_op(accelerator)
    if int(os.environ.get("WORLD_SIZE", 1)) == 1 and not torch.distributed.is_initialized():
        # A world of one needs no rendezvous: an in-memory store, so no port is taken and runs started
        # side by side (tests, a sweep, notebooks) cannot collide. DeepSpeed reads the rank variables.
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
        torch.distributed.init_process_group(backend, store=torch.distributed.HashStore(), rank=0, world_size=1)
    deepspeed.init_distributed(dist_backend=backend, verbose=False)
    if accelerator.device_name() == "cpu" and torch.distributed.get_world_size() > 1:
        release_shared_memory_name()
    # Tear the group down before interpreter exit: gloo's threads still running at exit abort the
    # rank ("terminate called without an active exception"), which the launcher reports as a failure.
    atexit.register(_destroy_process_group)
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if accelerator.device_name() != "cpu":
        accelerator.set_device(local_rank)
    set_seed(seed)
    return torch.distributed.get_rank(), torch.distributed.get_world_size(), local_rank


def skip_shared_memory_comm_op(accelerator) -> None:
    """One rank reduces nothing: DeepSpeed's CPU shared-memory allreduce op would only cost its JIT
    build at the first start in each virtualenv (40-110 s) and a compiler check at later ones.
    DeepSpeed builds the op only if its table of compatible ops says so (deepspeed/comm/torch.py)."""
    builder = accelerator.create_op_builder("ShareMemCommBuilder")
    if builder is not None:
        import deepspeed.ops
        deepspeed.ops.__compatible_ops__[builder.NAME] = False


def shared_memory_buffer(rank: int) -> str:
    """The file of DeepSpeed's CPU shared-memory allreduce buffer of `rank` (ops/csrc/cpu/comm/shm.cpp names it
    from the user id, MASTER_ADDR and MASTER_PORT; it exists when every rank of the world is on this machine)."""
    return (f"/dev/shm/deepspeed_allreduce_buffer_{os.getuid()}_{os.environ.get('MASTER_ADDR', '')}_"
            f"{os.environ.get('MASTER_PORT', '')}_{rank}")


def release_shared_memory_name() -> None:
    """DeepSpeed creates a 67 MB shared-memory buffer per rank for its CPU allreduce and never unlinks it, so
    every multi-rank CPU run, finished or killed, leaves them in /dev/shm (RAM), and a later run on the same
    port would open the stale ones. Once every rank has mapped every buffer (init_distributed returns after
    mapping its peers'; the barrier waits for all of them), the names are unlinked: the mappings stay valid for
    this run and the memory goes back when its last rank exits, however it exits."""
    torch.distributed.barrier()
    try:
        os.unlink(shared_memory_buffer(torch.distributed.get_rank()))
    except FileNotFoundError:  # not every rank on this machine: DeepSpeed made no buffer
        pass


def set_seed(seed: int) -> None:
    """The same seed on every rank: DeepSpeed broadcasts rank 0's weights anyway, and dropout then
    differs between ranks only through their data."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    get_accelerator().manual_seed_all(seed)


def _destroy_process_group() -> None:
    if torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
