#!/usr/bin/env python
"""Minimal reproduction of a torch bug: compiled FlexAttention on CPU returns wrong numbers (or NaN)
for some sequence lengths below one 128-token tile. torch alone; no project code.

Each (B, H, L, D) is run in FRESH processes (`--trials` of them): whether a process is hit varies from
process to process (and is then the same for every call in it), so one process proves little. Prints a
Markdown table: the shape, how many processes gave a wrong result, and the largest error seen.

    python tools/diagnostics/flex_cpu_repro.py                      # the default grid
    ATEN_CPU_CAPABILITY=avx2 python tools/diagnostics/flex_cpu_repro.py --lengths 40 --trials 8
    python tools/diagnostics/flex_cpu_repro.py --causal-block-mask    # as the project calls it
"""
import argparse
import json
import subprocess
import sys

ONE_SHAPE = """
import json, sys, torch, torch.nn.functional as F
from torch.nn.attention.flex_attention import create_block_mask, flex_attention
B, H, L, D, seed, causal = map(int, sys.argv[1:])
torch.manual_seed(seed)
q, k, v = (torch.randn(B, H, L, D) for _ in range(3))
block_mask = create_block_mask(lambda b, h, i, j: j <= i, None, None, L, L, device="cpu") if causal else None
out = torch.compile(flex_attention, dynamic=False)(q, k, v, block_mask=block_mask)   # no score_mod
error = (out - F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))).abs().max().item()
print(json.dumps(error))
"""


def run_once(batch, heads, length, head_dim, seed, causal):
    done = subprocess.run([sys.executable, "-c", ONE_SHAPE, *map(str, (batch, heads, length, head_dim, seed, causal))],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return None  # the compile itself failed (e.g. ATEN_CPU_CAPABILITY=default)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dims", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--lengths", type=int, nargs="+", default=[8, 24, 40, 56, 12, 20, 48, 64, 100, 136, 1000])
    parser.add_argument("--trials", type=int, default=3, help="fresh processes per shape")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--causal-block-mask", action="store_true",
                        help="causal attention through a block mask (128-token tiles), as the project uses it")
    args = parser.parse_args()
    import torch
    print(f"torch {torch.__version__}, CPU capability {torch.backends.cpu.get_cpu_capability()}, "
          f"{'causal block mask' if args.causal_block_mask else 'no block mask'}\n")
    print("| B, H, L, D | L % 16 | wrong processes | largest error |\n|---|---|---|---|")
    for head_dim in args.head_dims:
        for length in args.lengths:
            errors = [run_once(args.batch, args.heads, length, head_dim, seed, int(args.causal_block_mask)) for seed in range(args.trials)]
            wrong = sum(e is None or not e <= args.tolerance for e in errors)  # NaN counts as wrong
            largest = "compile failed" if None in errors else f"{max(errors, key=lambda e: (e != e, e)):.1e}"
            print(f"| {args.batch}, {args.heads}, {length}, {head_dim} | {length % 16} | {wrong} / {args.trials} "
                  f"| {largest} |", flush=True)


if __name__ == "__main__":
    main()
