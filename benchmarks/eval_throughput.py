#!/usr/bin/env python
"""Evaluation throughput and peak memory of every positional method, relative to `none`, in one run.

    python benchmarks/eval_throughput.py                        # configs/tiny.yml at L = 512 1024 2048
    python benchmarks/eval_throughput.py configs/tiny.yml --set num-layers=4 --set hidden-size=256 \
        --set num-attention-heads=8 --lengths 512 1024 2048 --rounds 3

The model is train_throughput.py's (the same configs and --set overrides), built as evaluate.py
builds it: on this device in its evaluation dtype (megatron/checkpoint/inference_model.py), in eval mode, with
the configured `attention-impl` (`auto` by default), scoring one sequence of L random tokens per
forward (evaluate.py's eval-micro-batch-size 1) under torch.inference_mode. At each length the
methods and the peer row (Hugging Face GPTNeoXForCausalLM at the same shape, benchmarks/hf_peer.py;
off with --no-peer) take turns for several rounds (benchmarks/measure.py); each figure is its median
round, and `vs none` is its time per forward over `none`'s.

Peak memory (off with --no-memory): each (method, length) again in a fresh process, one untimed
forward, then the rise of the peak memory during a second one (megatron/device_memory.py's PeakMemory:
the process's peak RSS on CPU, CUDA's max allocated on a GPU): what a forward needs beyond the
weights and the tokens.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from benchmarks.hf_peer import PEER, build_peer_forward  # noqa: E402
from benchmarks.measure import METHODS_HELP, PROCESS_TIME_HELP, alternating_rounds, clock, method_settings  # noqa: E402

from megatron.checkpoint.inference_model import inference_device_and_dtype  # noqa: E402
from megatron.device_memory import PeakMemory  # noqa: E402
from megatron.model import GPTModel  # noqa: E402
from megatron.neox_arguments.to_model import model_config
from megatron.model.positional_embeddings import available  # noqa: E402
from megatron.neox_arguments import NeoXArgs, parse_overrides, run_cli  # noqa: E402
from megatron.tokenizer import build_tokenizer  # noqa: E402


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="*", default=["configs/tiny.yml"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--methods", nargs="+", default=list(available()), help=METHODS_HELP)
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 1024, 2048])
    parser.add_argument("--steps", type=int, default=2, help="timed forwards per method per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="untimed forwards per method and length first")
    parser.add_argument("--no-peer", action="store_true", help="leave out the HF GPT-NeoX row")
    parser.add_argument("--process-time", action="store_true", help=PROCESS_TIME_HELP)
    parser.add_argument("--no-memory", action="store_true", help="leave out the peak memory processes")
    parser.add_argument("--measure", nargs=2, metavar=("NAME", "LENGTH"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def build_forward(cli, name: str, max_length: int):
    """(forward(tokens [1, L]), args, vocabulary size, device) of method `name` or of the peer."""
    # max-position-embeddings: `learned` embeds the longest length (it only sizes its table).
    overrides = {"max_position_embeddings": max(cli.lengths), **parse_overrides(cli.set), "save": None, "load": None}
    method, settings = ("rotary", {}) if name == PEER else method_settings(name)
    args = NeoXArgs.from_ymls(cli.configs, {**overrides, **settings, "pos_emb": method})
    tokenizer = build_tokenizer(args.tokenizer_run())
    device, dtype = inference_device_and_dtype(args.inference_run())
    if name == PEER:
        forward = build_peer_forward(args, tokenizer.padded_vocab_size, args.rotary_pct, max_length, device, dtype)
    else:
        torch.manual_seed(args.seed)
        forward = GPTModel(model_config(args, tokenizer.padded_vocab_size)).to(device=device, dtype=dtype).eval()
    return forward, args, tokenizer.vocab_size, device


def random_tokens(vocab: int, length: int, device):
    return torch.randint(0, vocab, (1, length), generator=torch.Generator().manual_seed(length)).to(device)


def measure_peak(cli) -> dict:
    """In a child process: the peak memory rise (MB) of one forward, after an untimed one."""
    name, length = cli.measure[0], int(cli.measure[1])
    forward, _, vocab, device = build_forward(cli, name, max(cli.lengths))
    tokens = random_tokens(vocab, length, device)
    with torch.inference_mode():
        forward(tokens)  # faults in allocator pools and thread state for every method alike
        with PeakMemory(device.type) as peak:
            forward(tokens)
    return {"peak_mb": peak.peak_mb}


def peak_mb(cli, name: str, length: int) -> float | None:
    child_env = os.environ | {"MALLOC_MMAP_THRESHOLD_": "65536"}  # large blocks back to the OS when freed
    command = [sys.executable, __file__, *cli.configs, *(f"--set={s}" for s in cli.set),
               "--lengths", *map(str, cli.lengths), "--measure", name, str(length)]
    done = subprocess.run(command, env=child_env, capture_output=True, text=True)
    if done.returncode != 0:
        print(f"peak memory of {name} at L={length} failed: {done.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
        return None
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_mb"]


def main():
    cli = parse_args()
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", torch.get_num_threads())))
    now = clock(cli.process_time)
    if cli.measure:
        print(json.dumps(measure_peak(cli)))
        return
    names = ["none"] + [m for m in cli.methods if m != "none"] + ([] if cli.no_peer else [PEER])
    forwards = {}
    for name in names:
        forwards[name], args, vocab, device = build_forward(cli, name, max(cli.lengths))

    per_forward, peaks = {}, {}
    for length in cli.lengths:
        tokens = random_tokens(vocab, length, device)

        def run(name, steps):
            start = now()
            with torch.inference_mode():
                for _ in range(steps):
                    forwards[name](tokens)
            if device.type == "cuda":
                torch.cuda.synchronize()
            return now() - start

        print(f"L = {length}", file=sys.stderr)
        per_forward[length] = alternating_rounds(run, names, rounds=cli.rounds, steps=cli.steps, warmup=cli.warmup)
        if not cli.no_memory:
            peaks[length] = {name: peak_mb(cli, name, length) for name in names}

    dtype = next(forwards["none"].parameters()).dtype
    print(f"\n{args.num_layers} layers, hidden {args.hidden_size}, {args.num_attention_heads} heads, batch 1, "
          f"{str(dtype).removeprefix('torch.')} on {device.type}, attention-impl {args.attention_impl}, "
          f"{torch.get_num_threads()} threads; median of {cli.rounds} rounds x {cli.steps} forwards of "
          f"{'CPU' if cli.process_time else 'wall-clock'} time; "
          f"peak: {'none measured' if cli.no_memory else 'rise during one forward, in its own process'}\n")
    header = "| method |" + "".join(f" L={L} tokens/s | vs none | peak MB |" for L in cli.lengths)
    print(header)
    print("|---|" + "---:|" * (3 * len(cli.lengths)))
    for name in names:
        cells = []
        for L in cli.lengths:
            seconds, peak = per_forward[L][name], peaks.get(L, {}).get(name)
            cells += [f"{L / seconds:,.0f}", f"{seconds / per_forward[L]['none']:.3f}",
                      "—" if peak is None else f"{peak:,.1f}"]
        print(f"| {name} | " + " | ".join(cells) + " |")
    if PEER in names and "rotary" in names:
        ratios = ", ".join(f"L={L}: {per_forward[L][PEER] / per_forward[L]['rotary']:.3f}x" for L in cli.lengths)
        print(f"\nrotary vs {PEER}, its tokens/s: {ratios}")


if __name__ == "__main__":
    run_cli(main)
