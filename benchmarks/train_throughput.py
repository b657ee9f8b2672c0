#!/usr/bin/env python
"""Training throughput of every positional method, relative to `none`, in one run.

    python benchmarks/train_throughput.py                       # configs/tiny.yml on this machine
    python benchmarks/train_throughput.py configs/tiny.yml --set seq-length=256 --steps 10

Each method gets a DeepSpeed engine built exactly as train.py builds it and runs the real
train_step() (forward, backward, optimizer) on random tokens (the content does not change the
cost). Methods take turns for several rounds so that a shared machine's load drifts over all of
them alike; each method's figure is its median round. The paper's Table 4 (162M model, GPU)
orders training time ALiBi ~ sinusoidal ~ KERPLE-log < KERPLE-power < rotary < T5.

The peer row (`PEER`, off with --no-peer) is Hugging Face GPTNeoXForCausalLM at the same shape
(benchmarks/hf_peer.py), timed in the same rounds: what a user would pick instead of `rotary`.
"""
import argparse
import os
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.hf_peer import PEER, build_peer  # noqa: E402
from benchmarks.measure import METHODS_HELP, PROCESS_TIME_HELP, alternating_rounds, clock, method_settings  # noqa: E402

from megatron.data.random_tokens import random_batches  # noqa: E402
from megatron.model.positional_embeddings import available  # noqa: E402
from megatron.neox_arguments import NeoXArgs, parse_overrides, run_cli  # noqa: E402
from megatron.tokenizer import build_tokenizer  # noqa: E402
from megatron.training.loop import setup_model_and_optimizer, train_step  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="*", default=["configs/tiny.yml"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--methods", nargs="+", default=list(available()), help=METHODS_HELP)
    parser.add_argument("--steps", type=int, default=10, help="timed steps per method per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps per method first")
    parser.add_argument("--no-peer", action="store_true", help="leave out the HF GPT-NeoX row")
    parser.add_argument("--process-time", action="store_true", help=PROCESS_TIME_HELP)
    cli = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    now = clock(cli.process_time)
    methods = ["none"] + [m for m in cli.methods if m != "none"]

    overrides = {**parse_overrides(cli.set), "save": None, "load": None}
    runs = {}
    for method in methods:
        name, settings = method_settings(method)
        args = NeoXArgs.from_ymls(cli.configs, {**overrides, **settings, "pos_emb": name})
        args.join_process_group()
        tokenizer = build_tokenizer(args.tokenizer_run())
        run = args.training_run()
        engine, optimizer = setup_model_and_optimizer(run, tokenizer.padded_vocab_size)
        batches = random_batches(args.train_micro_batch_size_per_gpu, args.seq_length, tokenizer.vocab_size, args.seed)
        runs[method] = (run.step, engine, optimizer, batches, tokenizer.vocab_size)
    tokens_per_step = args.train_batch_size * args.seq_length
    peer = None
    if not cli.no_peer:
        peer, _ = build_peer(args, tokenizer.padded_vocab_size, args.rotary_pct)
        methods.append(PEER)

    def run(method, steps):
        start = now()
        if method == PEER:
            for _ in range(steps):
                peer()
            return now() - start
        step, engine, optimizer, batches, vocab = runs[method]
        for _ in range(steps):
            train_step(step, engine, optimizer, batches, vocab)
        return now() - start

    per_step = alternating_rounds(run, methods, rounds=cli.rounds, steps=cli.steps, warmup=cli.warmup)
    print(f"\n{args.num_layers} layers, hidden {args.hidden_size}, {args.num_attention_heads} heads, "
          f"seq {args.seq_length}, batch {args.train_batch_size}, {args.precision}, "
          f"{torch.get_num_threads()} threads; median of {cli.rounds} rounds x {cli.steps} steps of "
          f"{'CPU' if cli.process_time else 'wall-clock'} time")
    width = max(20, *(len(m) + 2 for m in methods))
    print(f"{'method':<{width}}{'tokens/s':>12}{'vs none':>10}{'time vs none':>14}")
    for method in sorted(methods, key=per_step.get):
        rate = tokens_per_step / per_step[method]
        print(f"{method:<{width}}{rate:>12,.0f}{per_step['none'] / per_step[method]:>10.3f}"
              f"{per_step[method] / per_step['none']:>14.3f}")
    if PEER in per_step and "rotary" in per_step:
        print(f"rotary vs {PEER}: {per_step[PEER] / per_step['rotary']:.3f}x its tokens/s")


if __name__ == "__main__":
    run_cli(main)
