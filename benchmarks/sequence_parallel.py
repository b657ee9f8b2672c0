"""Sequence parallelism (sequence-parallel-size P) on this machine: peak memory per rank and the time of a training
step (forward + backward, no optimizer) of one sequence, for each P, as ratios to P = 1 in one run.

Each P is its own group of P processes (gloo; P = 1 runs the model without the sequence-parallel path). Memory is
the rise of each rank's peak resident set size during one step (PeakMemory, reset before it), the largest over
the ranks; time is the median over `--steps` steps after one warm-up step, the slowest rank's. The model is
small and the sequence long, so attention dominates (`sdpa` path by default: its [H, L, L] terms are what a
rank's share of the heads cuts). On a CPU the P ranks share its cores: time per step measures the work and the
exchanges, not a speed-up from more devices.

    OMP_NUM_THREADS=1 python benchmarks/sequence_parallel.py [--length 4096] [--sizes 1 2]
"""
import argparse
import json
import os
import pathlib
import socket
import statistics
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from megatron.device_memory import PeakMemory  # noqa: E402

MODEL = {"num_layers": 2, "hidden_size": 128, "num_attention_heads": 8, "train_micro_batch_size_per_gpu": 1}
VOCAB = 256


def rank_main(rank: int, size: int, port: int, args, out: str) -> None:
    import deepspeed
    from deepspeed.accelerator import get_accelerator

    from megatron.run.initialize import skip_shared_memory_comm_op
    from megatron.model import GPTModel
    from megatron.model.sequence_parallel import SequenceParallel
    from megatron.neox_arguments import NeoXArgs
    from megatron.neox_arguments.to_model import model_config

    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=size)
    skip_shared_memory_comm_op(get_accelerator())
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    torch.manual_seed(0)
    values = MODEL | {"seq_length": args.length, "pos_emb": args.pos_emb, "attention_impl": args.attention_impl}
    model = GPTModel(model_config(NeoXArgs.from_dict(values), VOCAB))
    if size > 1:
        model.sequence_parallel = SequenceParallel(dist.group.WORLD)
    tokens = torch.randint(0, VOCAB, (1, args.length + 1), generator=torch.Generator().manual_seed(1))
    part = args.length // size
    mine = slice(rank * part, (rank + 1) * part)
    inputs, labels = tokens[:, :-1][:, mine], tokens[:, 1:][:, mine]

    def step():
        model.zero_grad(set_to_none=True)
        logits = model(inputs)
        F.cross_entropy(logits.flatten(0, 1), labels.flatten(), reduction="sum").backward()

    step()  # warm-up
    model.zero_grad(set_to_none=True)
    dist.barrier()
    with PeakMemory("cpu") as peak:
        step()
    seconds = []
    for _ in range(args.steps):
        dist.barrier()
        start = time.perf_counter()
        step()
        seconds.append(time.perf_counter() - start)
    with open(f"{out}.{rank}", "w") as f:
        json.dump({"peak_mb": peak.peak_mb, "seconds": statistics.median(seconds)}, f)
    dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=4096, help="tokens of the one sequence (default 4096)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[1, 2], help="sequence-parallel sizes (default 1 2)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per size (default 3)")
    parser.add_argument("--pos-emb", default="kerple_log")
    parser.add_argument("--attention-impl", default="sdpa", help="attention path (default sdpa; auto, blocked)")
    args = parser.parse_args()
    # glibc hands large blocks back to the OS at once (PeakMemory): read by each rank's process at its start
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    rows = {}
    with tempfile.TemporaryDirectory() as folder:
        for size in args.sizes:
            out = os.path.join(folder, f"p{size}")
            mp.spawn(rank_main, args=(size, free_port(), args, out), nprocs=size)
            ranks = [json.loads(pathlib.Path(f"{out}.{r}").read_text()) for r in range(size)]
            rows[size] = (max(r["peak_mb"] for r in ranks), max(r["seconds"] for r in ranks))
    base_mb, base_s = rows[args.sizes[0]]
    print(f"{args.pos_emb}, attention-impl {args.attention_impl}, {args.length} tokens, "
          f"{MODEL['num_layers']} layers x {MODEL['num_attention_heads']} heads, hidden {MODEL['hidden_size']}, "
          f"fp32, one sequence; forward + backward")
    print(f"| P | peak MB per rank | x P={args.sizes[0]} | s per step | x P={args.sizes[0]} |")
    print("|---|---|---|---|---|")
    for size, (mb, seconds) in rows.items():
        print(f"| {size} | {mb:,.0f} | {mb / base_mb:.2f} | {seconds:.2f} | {seconds / base_s:.2f} |")


if __name__ == "__main__":
    main()
