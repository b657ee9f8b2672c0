"""Part 3 of the GPU check: evaluation of long sequences with the `auto` attention path against `sdpa`.

    python -m tools.gpu_check.eval_memory --json OUT.json [--profile 162M|tiny] [--budget SECONDS]

KERPLE-log on the 162M model (random weights: cost does not depend on them) scores one sequence of L
tokens the way evaluate.py does (no autograd, bf16 on CUDA, megatron.evaluation.scoring.window_losses),
at each length for `auto` (`sdpa` while its L x L mask fits in a quarter of the GPU's memory, then
FlexAttention), `sdpa` (the [H, L, L] bias materialised) and on CUDA `triton` (the bias inside a flash
kernel). Per (path, L): tokens/s and the peak memory of one timed pass: CUDA's max allocated, or on CPU the
rise of the process's peak RSS (megatron/device_memory.py). An untimed pass comes first at a path's first
length, and at every length for `auto` (FlexAttention compiles per length); `sdpa` and `triton` compile
nothing per length, so past their first length the one pass is all (what makes a million tokens with
`triton` fit in the budget). `sdpa` is skipped where its estimate (megatron/model/attention/choice.py's
sdpa_bytes) exceeds the free memory.
The paths run one after another, each from the shortest length up, in the order of IMPLS: on CUDA `triton`
first, so the budget goes to its longest lengths before `auto`'s compilations. A length is skipped when its
expected time (the path's last pass, scaled as L^2, times its passes) would overrun the budget, and a length
that runs out of memory says so in its row.
"""
import argparse
import dataclasses
import json
import math
import os
import time

import torch

from megatron.device_memory import PeakMemory
from megatron.evaluation.scoring import window_losses
from megatron.model import GPTModel
from megatron.model.attention.choice import sdpa_bytes
from .profiles import EVAL_LENGTHS, describe, model_args

# The paths, in the order they run. On CUDA the `triton` kernel (the table inside flash attention: linear memory)
# first: its long lengths, a million tokens the longest, are this part's point; on the CPU it would run in
# Triton's interpreter, far too slowly for any length here.
IMPLS = {"cuda": ("triton", "sdpa", "auto"), "cpu": ("auto", "sdpa")}
# Paths that compile nothing per length: an untimed pass at their first length only.
NO_COMPILE_PER_LENGTH = frozenset({"sdpa", "triton"})


def free_bytes(device: str) -> int:
    if device == "cuda":
        return torch.cuda.mem_get_info()[0]
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def measure(profile: str, device: str, lengths, budget: float) -> dict:
    began = time.perf_counter()
    models, rows = {}, []
    for impl in IMPLS[device]:
        args, vocab, padded_vocab = model_args(profile, "kerple_log", attention_impl=impl)
        torch.manual_seed(0)  # the same weights for both paths
        dtype = torch.bfloat16 if device == "cuda" and args.precision == "bf16" else torch.float32
        model = dataclasses.replace(args.model, padded_vocab_size=padded_vocab)
        models[impl] = GPTModel(model).to(device=device, dtype=dtype).eval()
    weights_mb = sum(p.numel() * p.element_size() for p in next(iter(models.values())).parameters()) / 2**20
    measured = {}  # per path: (seconds of its last timed pass, its one-off cost, that length)
    for impl, model in models.items():
        for length in lengths:
            row = {"impl": impl, "length": length}
            rows.append(row)
            warm_up = impl not in NO_COMPILE_PER_LENGTH or impl not in measured
            # This length's cost from the last one measured: each pass grows as L^2 (attention; the rest as L),
            # the one-off cost (FlexAttention's compilation) stays.
            last_pass, one_off, last_length = measured.get(impl, (0.0, 0.0, 0))
            passes = 2 if warm_up else 1
            expected = (one_off if warm_up else 0.0) + passes * last_pass * (length / last_length) ** 2 \
                if last_length else 0.0
            if time.perf_counter() - began + expected > budget:
                row["skipped"] = f"time budget spent (~{expected:.0f} s expected, {budget - (time.perf_counter() - began):.0f} s left)"
                continue
            need = sdpa_bytes(length=length, heads=args.num_attention_heads, batch=1, pairwise_bytes=0,
                              element_size=dtype.itemsize, writes_scores=False, needs_grad=False)
            if impl == "sdpa" and need > free_bytes(device):
                row["skipped"] = (f"the materialised bias needs ~{need / 2**30:.0f} GiB, "
                                  f"{free_bytes(device) / 2**30:.0f} GiB free")
                continue
            windows = torch.randint(0, vocab, (1, length + 1), generator=torch.Generator().manual_seed(length))

            def score():
                return window_losses(lambda x, **loss: model(x.to(device), **loss), windows, vocab)
            start = time.perf_counter()
            try:
                with torch.inference_mode():
                    if warm_up:
                        score()  # compiles flex for this length; allocator and kernels warm
                    with PeakMemory(device) as peak:
                        timed_start = time.perf_counter()
                        losses = score()
                        seconds = time.perf_counter() - timed_start
            except torch.OutOfMemoryError as err:
                row["error"] = f"out of memory: {str(err).splitlines()[0][:200]}"
                continue
            except Exception as err:  # noqa: BLE001 - one length failing must not hide the others
                row["error"] = f"{type(err).__name__}: {err}".splitlines()[0][:400]
                continue
            finally:
                if device == "cuda":
                    torch.cuda.empty_cache()
            measured[impl] = (seconds, max(0.0, time.perf_counter() - start - passes * seconds), length)
            row.update(seconds=round(seconds, 4), tokens_per_s=round(length / seconds, 1), warm_up_pass=warm_up,
                       peak_mb=round(peak.peak_mb, 1), mean_loss=round(float(losses.mean()), 4),
                       finite=bool(math.isfinite(float(losses.mean()))))
    return {"profile": profile, "model": describe(args), "device": device, "method": "kerple_log",
            "dtype": str(dtype).removeprefix("torch."), "weights_mb": round(weights_mb, 1),
            "seconds": round(time.perf_counter() - began, 1), "rows": rows,
            "peak_memory": "CUDA max allocated above the weights" if device == "cuda"
                           else "rise of the process's peak RSS"}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", required=True)
    parser.add_argument("--profile", default="162M", choices=["162M", "tiny"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--lengths", type=int, nargs="+", help="default: 4096 16384 65536 262144 1048576 (tiny: 128 256)")
    parser.add_argument("--budget", type=float, default=90.0)
    cli = parser.parse_args(argv)
    result = measure(cli.profile, cli.device, cli.lengths or EVAL_LENGTHS[cli.profile], cli.budget)
    with open(cli.json, "w") as out:
        json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
