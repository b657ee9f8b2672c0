#!/usr/bin/env python
"""`loss-head: sliced` against `full` in one process: the time and the peak memory of a training step's
forward and backward (and of an evaluation forward) of a model whose output layer has GPT-2's 50,304 rows.

    OMP_NUM_THREADS=1 python benchmarks/loss_head.py --tokens 4096

The two heads take turns for several rounds on the same weights and tokens; each figure is the median round.
Peak memory is megatron/device_memory.py's PeakMemory: on CPU the rise of the process's peak RSS (VmHWM) during
the block, which sees torch's allocations (tracemalloc would not); on CUDA torch's max allocated."""
import argparse
import pathlib
import statistics
import sys
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from megatron.device_memory import PeakMemory  # noqa: E402
from megatron.model import GPTModel  # noqa: E402
from megatron.neox_arguments import NeoXArgs  # noqa: E402
from megatron.neox_arguments.to_model import model_config  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
GPT2_ROWS, GPT2_VOCAB = 50304, 50257


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=4096, help="positions per step (one sequence)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    config = NeoXArgs.from_ymls([ROOT / "configs" / "tiny.yml"], {"seq_length": args.tokens, "pos_emb": "none"})
    model = GPTModel(model_config(config, GPT2_ROWS)).to(args.device)
    tokens = torch.randint(0, GPT2_VOCAB, (1, args.tokens + 1), device=args.device)
    inputs, labels = tokens[:, :-1], tokens[:, 1:]

    def train_step():
        model(inputs, labels=labels, vocab_size=GPT2_VOCAB).mean().backward()

    def evaluation():
        with torch.no_grad():
            model(inputs, labels=labels, vocab_size=GPT2_VOCAB)

    results = {}
    for _ in range(args.rounds + 1):  # the first round warms up, unrecorded
        for part, run in (("train step", train_step), ("evaluation", evaluation)):
            for head in ("full", "sliced"):
                model.loss_head = head
                model.zero_grad(set_to_none=True)
                with PeakMemory(args.device) as peak:
                    start = time.perf_counter()
                    run()
                    seconds = time.perf_counter() - start
                results.setdefault((part, head), []).append((seconds, peak.peak_mb))
    print(f"{config.num_layers} layers, hidden {config.hidden_size}, {args.tokens} tokens, {GPT2_ROWS}-row head, "
          f"{args.device}, median of {args.rounds} rounds")
    print(f"{'part':<12}{'head':<8}{'seconds':>9}{'vs full':>9}{'peak MB':>10}{'vs full':>9}")
    for part in ("train step", "evaluation"):
        full = [statistics.median(x) for x in zip(*results[(part, "full")][1:])]
        for head in ("full", "sliced"):
            seconds, peak = (statistics.median(x) for x in zip(*results[(part, head)][1:]))
            print(f"{part:<12}{head:<8}{seconds:>9.3f}{seconds / full[0]:>9.3f}{peak:>10.0f}{peak / full[1]:>9.3f}")


if __name__ == "__main__":
    main()
