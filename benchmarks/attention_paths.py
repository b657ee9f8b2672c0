"""What each positional method and attention path costs, measured in one run on this machine.

1. Training step (forward + backward, no optimizer) of a small model for every registered method on
   the `sdpa` and `blocked` paths, as milliseconds and as a ratio to `none` on the `sdpa` path.
2. Peak memory and time of one attention forward (no gradients) at L = 4096 and 16384 with 12 heads
   of 64 dims (kerple_log) for `sdpa`, `blocked` and `flex`. Each is measured in its own process as
   the rise of the peak resident set size (Linux VmHWM, reset after a warm-up run at the same
   length, so FlexAttention's compilation is not counted), with glibc returning large blocks to the
   OS at once. `sdpa` is skipped where its [H, L, L] bias alone would not fit in this machine's RAM.

    OMP_NUM_THREADS=1 python benchmarks/attention_paths.py [--steps 3] [--lengths 4096 16384]
"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import time

import torch
from tqdm import tqdm

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from megatron.device_memory import PeakMemory  # noqa: E402
from megatron.model import GPTModel  # noqa: E402
from megatron.neox_arguments.to_model import model_config
from megatron.model.attention import AttentionRun, attend, plan_attention  # noqa: E402
from megatron.model.positional_embeddings import available, build_positional_embedding  # noqa: E402
from megatron.neox_arguments import NeoXArgs  # noqa: E402

SMALL_MODEL = {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 8, "seq_length": 512,
               "attention_block_size": 128, "train_micro_batch_size_per_gpu": 2}
VOCAB = 512
MEMORY_HEADS, MEMORY_HEAD_DIM = 12, 64


def build_model(name: str, impl: str) -> GPTModel:
    args = NeoXArgs.from_dict(SMALL_MODEL | {"pos_emb": name, "attention_impl": impl})
    torch.manual_seed(0)
    return GPTModel(model_config(args, VOCAB))


def training_step_seconds(model: GPTModel, ids: torch.Tensor) -> float:
    start = time.perf_counter()
    logits = model(ids[:, :-1])
    torch.nn.functional.cross_entropy(logits.flatten(0, 1), ids[:, 1:].flatten()).backward()
    model.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def training_step_ms(steps: int) -> dict:
    """(method, path) -> median ms. Rounds visit every configuration in turn, so a shared
    machine's load drifts over all of them alike; round 0 warms up and is not counted."""
    models = {(name, impl): build_model(name, impl) for name in available() for impl in ("sdpa", "blocked")}
    ids = torch.randint(0, VOCAB, (SMALL_MODEL["train_micro_batch_size_per_gpu"], SMALL_MODEL["seq_length"] + 1))
    times = {key: [] for key in models}
    for round_ in tqdm(range(steps + 1), desc="training-step rounds", leave=False):
        for key, model in models.items():
            seconds = training_step_seconds(model, ids)
            if round_:
                times[key].append(seconds)
    return {key: 1000 * statistics.median(t) for key, t in times.items()}


def measure_attention_forward(impl: str, length: int) -> dict:
    """Runs in a child process: peak RSS rise (MB) and seconds of one attention forward."""
    torch.manual_seed(0)
    pe = build_positional_embedding("kerple_log", num_heads=MEMORY_HEADS, head_dim=MEMORY_HEAD_DIM)
    q, k, v = (torch.randn(1, MEMORY_HEADS, length, MEMORY_HEAD_DIM) for _ in range(3))
    positions = torch.arange(length)

    def forward():
        plan = plan_attention(pe, positions, AttentionRun(impl=impl, window=None, block_size=512, needs_grad=False,
                                                          dropout_p=0.0))
        return attend(q, k, v, plan)

    with torch.no_grad():
        forward()  # compiles flex; faults in allocator pools for every path alike
        with PeakMemory("cpu") as peak:
            start = time.perf_counter()
            forward()
            seconds = time.perf_counter() - start
    return {"peak_mb": peak.peak_mb, "seconds": seconds}


def memory_row(impl: str, length: int) -> str:
    bias_gb = MEMORY_HEADS * length * length * 4 / 1e9
    available_gb = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") / 1e9
    if impl == "sdpa" and 2 * bias_gb > available_gb:
        return (f"{impl:8s} L={length:6d}  skipped: the bias and its masked copy need {2 * bias_gb:.1f} GB, "
                f"{available_gb:.1f} GB free")
    child_env = os.environ | {"MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    done = subprocess.run([sys.executable, __file__, "--measure", impl, str(length)], env=child_env,
                          capture_output=True, text=True)
    if done.returncode != 0:
        return f"{impl:8s} L={length:6d}  failed: {done.stderr.strip().splitlines()[-1]}"
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return f"{impl:8s} L={length:6d}  peak +{result['peak_mb']:8.0f} MB  forward {result['seconds']:7.2f} s"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3, help="timed training steps per method and path")
    parser.add_argument("--lengths", type=int, nargs="*", default=[4096, 16384], help="lengths of the memory part")
    parser.add_argument("--measure", nargs=2, metavar=("IMPL", "LENGTH"), help=argparse.SUPPRESS)
    cli = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    if cli.measure:
        print(json.dumps(measure_attention_forward(cli.measure[0], int(cli.measure[1]))))
        return

    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s), device cpu")
    print(f"1. forward+backward per training step, model {SMALL_MODEL}, median of {cli.steps} steps", flush=True)
    ms = training_step_ms(cli.steps)
    baseline = ms["none", "sdpa"]
    print(f"{'method':20s} {'sdpa ms':>9s} {'ratio':>6s} {'blocked ms':>11s} {'ratio':>6s}   (ratio: to none on sdpa)")
    for name in available():
        sdpa_ms, blocked_ms = ms[name, "sdpa"], ms[name, "blocked"]
        print(f"{name:20s} {sdpa_ms:9.0f} {sdpa_ms / baseline:6.2f} {blocked_ms:11.0f} {blocked_ms / baseline:6.2f}")

    print(f"\n2. one attention forward without gradients, kerple_log, {MEMORY_HEADS} heads x {MEMORY_HEAD_DIM} dims, "
          "batch 1, block 512; peak = rise of the process's peak RSS")
    for length in cli.lengths:
        for impl in ("sdpa", "blocked", "flex"):
            print(memory_row(impl, length), flush=True)


if __name__ == "__main__":
    main()
