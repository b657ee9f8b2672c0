#!/usr/bin/env python
"""Greedy KV-cache generation against transformers' `generate()` on the export of the same weights, in one run.

    python benchmarks/generation_throughput.py                       # configs/tiny.yml, prompt 64, 1k new tokens
    python benchmarks/generation_throughput.py --set num-layers=4 --set hidden-size=256 \
        --set num-attention-heads=8 --new-tokens 1024 8192 --rounds 2

For each method (default rotary, kerple_log, alibi) one model of configs/tiny.yml's shape (and the --set
overrides) with random weights, and its Hugging Face export built from those weights by
tools/ckpts/hf_export: transformers' own GPTNeoXForCausalLM for rotary (the native export), the export's
trust_remote_code folder (this project's positional files under a transformers decoder) for the others.
Each row generates `new tokens` greedily after one prompt of random tokens, this project through
generate.py's `generate_tokens` (its KV cache), the peer through `model.generate(do_sample=False)`
with its DynamicCache; both must produce the same tokens (a row whose tokens differ is reported as such,
not timed as equal work). The rows take turns for several rounds (benchmarks/measure.py); tokens/s is the
new tokens over the median round's seconds (the prompt's forward included), and `vs peer` is this
project's time over the peer's for the same method.

Peak memory (off with --no-memory): each row again in a fresh process: the rise of the process's peak RSS
(CUDA's max allocated on a GPU) during one generation, after an untimed one.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import torch  # noqa: E402
import transformers  # noqa: E402

from benchmarks.measure import alternating_rounds  # noqa: E402

from megatron.device_memory import PeakMemory  # noqa: E402
from megatron.model import GPTModel  # noqa: E402
from megatron.neox_arguments.to_model import model_config
from megatron.neox_arguments import NeoXArgs, parse_overrides, run_cli  # noqa: E402
from megatron.text_generation import generate_tokens  # noqa: E402
from megatron.tokenizer import build_tokenizer  # noqa: E402
from tools.ckpts.hf_export import Source, export_model  # noqa: E402

PROMPT = 64


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="*", default=["configs/tiny.yml"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--methods", nargs="+", default=["rotary", "kerple_log", "alibi"])
    parser.add_argument("--new-tokens", type=int, nargs="+", default=[1024])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-memory", action="store_true", help="leave out the peak memory processes")
    parser.add_argument("--measure", nargs=3, metavar=("METHOD", "SIDE", "NEW"), help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def build(cli, method: str, folder: pathlib.Path):
    """(ours, peer, prompt) for `method`: this project's model and the export of the same weights."""
    overrides = {**parse_overrides(cli.set), "pos_emb": method, "save": None, "load": None,
                 "max_position_embeddings": PROMPT + max(cli.new_tokens)}
    args = NeoXArgs.from_ymls(cli.configs, overrides)
    tokenizer = build_tokenizer(args.tokenizer_run())
    torch.manual_seed(args.seed)
    ours = GPTModel(model_config(args, tokenizer.padded_vocab_size)).eval()
    export_model(Source(args, ours, tokenizer, step=0), folder / method)
    peer = transformers.AutoModelForCausalLM.from_pretrained(folder / method, trust_remote_code=True).eval()
    prompt = torch.randint(0, tokenizer.vocab_size, (PROMPT,), generator=torch.Generator().manual_seed(0)).tolist()
    return ours, peer, prompt


def generator(side: str, ours, peer, prompt):
    """generate(new) -> the new token ids, greedily, on one side."""
    if side == "ours":
        return lambda new: generate_tokens(ours, [prompt], max_new_tokens=new)[0]
    ids = torch.tensor([prompt])

    def generate(new):
        with torch.inference_mode():
            out = peer.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, eos_token_id=None,
                                pad_token_id=0)
        return out[0, len(prompt):].tolist()
    return generate


def measure_peak(cli) -> None:
    method, side, new = cli.measure[0], cli.measure[1], int(cli.measure[2])
    with tempfile.TemporaryDirectory() as folder:
        generate = generator(side, *build(cli, method, pathlib.Path(folder)))
    generate(8)  # untimed: first-call allocations
    with PeakMemory("cpu") as peak:
        generate(new)
    print(json.dumps({"peak_mb": peak.peak_mb}))


def peak_in_child(cli, method, side, new) -> float:
    argv = [sys.executable, __file__, *cli.configs, *sum((["--set", s] for s in cli.set), []),
            "--new-tokens", *map(str, cli.new_tokens), "--measure", method, side, str(new)]
    done = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"})
    if done.returncode:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])["peak_mb"]


def main(argv=None):
    cli = parse_args(argv)
    if cli.measure:
        return measure_peak(cli)
    print(f"# torch {torch.__version__} on {torch.backends.cpu.get_cpu_capability()}, {torch.get_num_threads()} "
          f"threads; prompt {PROMPT}; greedy")
    with tempfile.TemporaryDirectory() as folder:
        built = {method: build(cli, method, pathlib.Path(folder)) for method in cli.methods}
        print("| method | new tokens | ours tokens/s | peer tokens/s | vs peer | same tokens | ours peak MB | "
              "peer peak MB |\n|---|---:|---:|---:|---:|---|---:|---:|")
        for new in cli.new_tokens:
            runs = {(m, side): generator(side, *built[m]) for m in cli.methods for side in ("ours", "peer")}
            same = {m: runs[(m, "ours")](new) == runs[(m, "peer")](new) for m in cli.methods}

            def run(name, steps):
                start = time.perf_counter()
                for _ in range(steps):
                    runs[name](new)
                return time.perf_counter() - start
            seconds = alternating_rounds(run, list(runs), rounds=cli.rounds, steps=1, warmup=0)
            for m in cli.methods:
                peaks = ["-", "-"] if cli.no_memory else [f"{peak_in_child(cli, m, side, new):.1f}"
                                                          for side in ("ours", "peer")]
                ours, theirs = seconds[(m, "ours")], seconds[(m, "peer")]
                print(f"| {m} | {new} | {new / ours:,.0f} | {new / theirs:,.0f} | {ours / theirs:.2f} | "
                      f"{'yes' if same[m] else 'NO'} | {peaks[0]} | {peaks[1]} |", flush=True)


if __name__ == "__main__":
    run_cli(main)
