#!/usr/bin/env python
"""Torch-only reproduction, ready to file upstream: inductor reuses a compiled CPU FlexAttention kernel
across runs with different CPU capabilities (`ATEN_CPU_CAPABILITY`), and the reused kernel returns
wrong numbers. No project code is imported.

Every run is a FRESH process that compiles `flex_attention` (B=1, H=4, D=16, causal block mask from
`create_block_mask`) and compares it with `scaled_dot_product_attention(is_causal=True)`. The runs
differ only in the CPU code path they are forced onto and in the inductor cache folder they get:

    python tools/diagnostics/flex_cpu_repro.py                            # both experiments below
    python tools/diagnostics/flex_cpu_repro.py --experiment shared-cache  # native, then AVX2, one cache
    python tools/diagnostics/flex_cpu_repro.py --experiment fresh-cache   # one new cache per run
    python tools/diagnostics/flex_cpu_repro.py --experiment tail --trials 3   # the L % 16 == 8 grid

- `shared-cache`: for each length, two runs share one new cache folder, in both orders
  (native then avx2, avx2 then native): the second run reads the first run's kernel.
- `fresh-cache`: the same runs, each with its own new cache folder.
- `tail`: the lengths below one 128-token tile once reported wrong "for L % 16 == 8" (no block mask,
  no score_mod), each in fresh processes with a fresh cache, forced AVX2 and native.

The table names the capability each process reported (`torch.backends.cpu.get_cpu_capability()`).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

ONE_RUN = """
import json, sys, torch, torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
B, H, L, D, seed, causal = map(int, sys.argv[1:])
torch.manual_seed(seed)
q, k, v = (torch.randn(B, H, L, D) for _ in range(3))
block_mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, L, L, device="cpu") if causal else None
out = torch.compile(flex_attention, dynamic=False)(q, k, v, block_mask=block_mask)   # no score_mod
error = (out - F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))).abs().max().item()
print(json.dumps({"error": error, "capability": torch.backends.cpu.get_cpu_capability()}))
"""

CODE_PATHS = {"native": None, "avx2": "avx2"}


def run_once(shape, *, seed, causal, code_path, cache_dir):
    """One fresh process; returns {"error", "capability"} or {"error": None, "why": ...}."""
    env = {key: value for key, value in os.environ.items() if key not in ("ATEN_CPU_CAPABILITY",)}
    if CODE_PATHS[code_path]:
        env["ATEN_CPU_CAPABILITY"] = CODE_PATHS[code_path]
    env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    done = subprocess.run([sys.executable, "-c", ONE_RUN, *map(str, (*shape, seed, int(causal)))],
                          capture_output=True, text=True, env=env)
    if done.returncode != 0:
        return {"error": None, "capability": code_path, "why": done.stderr.strip().splitlines()[-1:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def shown(error):
    return "failed" if error is None else f"{error:.1e}"


def cache_experiment(lengths, shared: bool, tolerance):
    print(f"\n### {'One shared' if shared else 'A fresh'} inductor cache "
          f"{'for both runs of a row' if shared else 'for every run'}\n")
    print("| B, H, L, D | first run: code path (reported) | error | second run: code path (reported) | error |")
    print("|---|---|---|---|---|")
    for length in lengths:
        for order in (("native", "avx2"), ("avx2", "native")):
            with tempfile.TemporaryDirectory(prefix="inductor-shared-") as shared_dir:
                cells = []
                for code_path in order:
                    cache = shared_dir if shared else tempfile.mkdtemp(prefix="inductor-fresh-")
                    result = run_once((1, 4, length, 16), seed=0, causal=True, code_path=code_path, cache_dir=cache)
                    wrong = result["error"] is None or not result["error"] <= tolerance
                    cells += [f"{code_path} ({result['capability']})", shown(result["error"]) + (" **wrong**" if wrong else "")]
            print(f"| 1, 4, {length}, 16 | " + " | ".join(cells) + " |", flush=True)


def tail_experiment(lengths, head_dims, trials, tolerance):
    print("\n### Lengths below one tile, no block mask, a fresh cache per process\n")
    print("| B, H, L, D | L % 16 | code path (reported) | wrong processes | largest error |\n|---|---|---|---|---|")
    for code_path in CODE_PATHS:
        for head_dim in head_dims:
            for length in lengths:
                results = [run_once((2, 4, length, head_dim), seed=seed, causal=False, code_path=code_path,
                                    cache_dir=tempfile.mkdtemp(prefix="inductor-fresh-")) for seed in range(trials)]
                errors = [r["error"] for r in results]
                wrong = sum(e is None or not e <= tolerance for e in errors)  # NaN counts as wrong
                largest = "failed" if None in errors else f"{max(errors, key=lambda e: (e != e, e)):.1e}"
                print(f"| 2, 4, {length}, {head_dim} | {length % 16} | {code_path} ({results[0]['capability']}) "
                      f"| {wrong} / {trials} | {largest} |", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", choices=("shared-cache", "fresh-cache", "tail", "all"), default="all")
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 384],
                        help="lengths of the cache experiments")
    parser.add_argument("--tail-lengths", type=int, nargs="+", default=[8, 24, 40, 56, 48, 64])
    parser.add_argument("--head-dims", type=int, nargs="+", default=[8, 16], help="head dims of the tail experiment")
    parser.add_argument("--trials", type=int, default=2, help="fresh processes per shape in the tail experiment")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    import torch
    print(f"torch {torch.__version__}, this machine's native CPU capability "
          f"{torch.backends.cpu.get_cpu_capability()}, Python {sys.version.split()[0]}")
    if args.experiment in ("shared-cache", "all"):
        cache_experiment(args.lengths, shared=True, tolerance=args.tolerance)
    if args.experiment in ("fresh-cache", "all"):
        cache_experiment(args.lengths, shared=False, tolerance=args.tolerance)
    if args.experiment in ("tail", "all"):
        tail_experiment(args.tail_lengths, args.head_dims, args.trials, args.tolerance)


if __name__ == "__main__":
    main()
