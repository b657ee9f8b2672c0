#!/usr/bin/env python
"""The thread count the entry points choose on CPU (megatron/run/cpu_threads.py) against every fixed
setting, on a quiet machine and on one kept busy, as ratios within one run.

    python benchmarks/cpu_threads.py                  # configs/tiny.yml's model, kerple_log, L = 512
    python benchmarks/cpu_threads.py --set num-layers=4 --set hidden-size=256 --set num-attention-heads=8 \
        --length 1024 --forwards 6 --rounds 3

For each load — none added, then 2x the cores in busy-loop processes this script starts (and stops) —
each setting scores the same forwards in a fresh process, the settings taking turns for --rounds rounds:
`chosen` is what evaluate.py does with OMP_NUM_THREADS unset (the rule of megatron/run/cpu_threads.py,
which reads the load average it finds), `1` .. `cores` are OMP_NUM_THREADS=N. Each time is the median
round's wall clock for --forwards forwards (evaluate.py's: one sequence per forward, inference mode,
`auto` attention) after one untimed forward; `vs best` is a setting's time over the best setting's at
that load. The load average printed is the machine's as the load's rounds began: on a shared machine
other work adds to it. The issue's targets: `chosen` within 1.1x of the best when quiet, within 1.5x
when busy.
"""
import argparse
import json
import multiprocessing
import os
import pathlib
import statistics
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[1]


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("configs", nargs="*", default=["configs/tiny.yml"])
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--method", default="kerple_log")
    parser.add_argument("--length", type=int, default=512)
    parser.add_argument("--forwards", type=int, default=4, help="timed forwards per setting per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--busy-factor", type=float, default=2.0, help="busy-loop processes per core")
    parser.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def measure(cli) -> float:
    """In a fresh process: seconds for --forwards forwards, threads chosen as the entry points choose."""
    sys.path.insert(0, str(ROOT))
    import torch
    from benchmarks.eval_throughput import build_forward, parse_args as eval_args, random_tokens
    from megatron.run.cpu_threads import choose_cpu_threads
    choose_cpu_threads()
    forward_cli = eval_args([*cli.configs, *sum((["--set", s] for s in cli.set), []), "--lengths", str(cli.length)])
    forward, _, vocab, device = build_forward(forward_cli, cli.method, cli.length)
    tokens = random_tokens(vocab, cli.length, device)
    with torch.inference_mode():
        forward(tokens)
        began = time.perf_counter()
        for _ in range(cli.forwards):
            forward(tokens)
    print(json.dumps({"seconds": time.perf_counter() - began, "threads": torch.get_num_threads()}))
    return 0


def busy_loop():
    while True:
        pass


def one_setting(argv, setting: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if setting != "chosen":
        env["OMP_NUM_THREADS"] = setting
    done = subprocess.run([sys.executable, __file__, *argv, "--measure"], cwd=ROOT, env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def at_load(argv, cli, settings, busy: int) -> dict:
    workers = [multiprocessing.Process(target=busy_loop, daemon=True) for _ in range(busy)]
    for worker in workers:
        worker.start()
    try:
        time.sleep(5 if busy else 0)  # the busy loops running before the first setting starts
        load = os.getloadavg()[0]
        times, threads = {s: [] for s in settings}, {}
        for _ in range(cli.rounds):
            for setting in settings:
                result = one_setting(argv, setting)
                times[setting].append(result["seconds"])
                threads[setting] = result["threads"]
    finally:
        for worker in workers:
            worker.terminate()
            worker.join()
    return {"load": load, "busy": busy, "median": {s: statistics.median(t) for s, t in times.items()},
            "threads": threads}


def main():
    cli = parse_args()
    argv = [a for a in sys.argv[1:]]
    if cli.measure:
        return measure(cli)
    cores = os.cpu_count() or 1
    settings = ["chosen"] + [str(n) for n in range(1, cores + 1)]
    print(f"{cli.method}, L = {cli.length}, {cli.forwards} forwards per round, median of {cli.rounds} rounds, "
          f"{cores} cores")
    print("| load (1-min average at start) | busy-loop processes | setting | threads | seconds | vs best |")
    print("|---|---:|---|---:|---:|---:|")
    for busy in (0, int(cli.busy_factor * cores)):
        result = at_load(argv, cli, settings, busy)
        best = min(result["median"].values())
        for setting in settings:
            seconds = result["median"][setting]
            print(f"| {result['load']:.1f} | {busy} | {setting} | {result['threads'][setting]} | {seconds:.2f} | "
                  f"{seconds / best:.2f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
