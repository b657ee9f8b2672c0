"""Part 4 of the GPU check: the training loop itself, through the user's entry points.

    python -m tools.gpu_check.train_loop --json OUT.json [--profile 162M|tiny] [--budget SECONDS]
    python -m tools.gpu_check.train_loop --stage      # here, before a GPU run: fill .gpu-data/

On the GPU machine, from files that travel with the working tree (`.gpu-data/`: GPT-2's vocab and merges
and the code corpus as `.jsonl.zst`, staged here because that machine reaches no network):
1. tools/datasets/preprocess_data.py tokenizes the corpus with GPT-2 BPE (as a user would);
2. `deepy.py train.py configs/kerple_log.yml` (the 162M model at 512 tokens, micro-batch 32, bf16) trains
   for the first half of the steps and saves a checkpoint;
3. the same command again resumes from it (`load`) and trains to the end.
The JSON holds each launch's wall time, the losses the log printed, the checkpoint folders, and whether
the resumed run started at the saved step. The budget is split between the launches; the step count
is fixed in advance (a run that cannot finish in time is killed and reported as such).
"""
import argparse
import json
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import time

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
STAGED = REPO_ROOT / ".gpu-data"
FILES = ("gpt2-vocab.json", "gpt2-merges.txt", "stdlib.jsonl.zst")
# Where `--stage` finds them on a developer's machine: prepare_data.py's `data/` (GPT-2's files and the
# code corpus); the GPT-2 files may also be given with --gpt2-dir.
SOURCES = {"gpt2-vocab.json": "data/gpt2-vocab.json", "gpt2-merges.txt": "data/gpt2-merges.txt",
           "stdlib.jsonl.zst": "data/stdlib/stdlib.jsonl.zst"}
# (config, steps, interval of the log's loss lines): the paper's model; the tiny CPU rehearsal.
PROFILES = {"162M": ("configs/kerple_log.yml", 200, 20), "tiny": ("configs/tiny.yml", 8, 2)}
# Tokenizer processes: four on the GPU machine's 16 cores; one on the 2-core CPU of the rehearsal, where starting
# four took longer than the tokenizing (a 3 MB slice: 16.1 s wall with four, 9.5 s with one, 2026-11-29).
WORKERS = {"162M": 4, "tiny": 1}
LOSS_LINE = re.compile(r"step (\d+)/(\d+) \| loss ([\d.]+)")


def stage(gpt2_dir: str | None) -> None:
    STAGED.mkdir(exist_ok=True)
    exclude = REPO_ROOT / ".git" / "info" / "exclude"  # staged files travel but are never committed
    if exclude.is_file() and "/.gpu-data/" not in exclude.read_text(errors="replace"):
        with open(exclude, "a") as out:
            out.write("/.gpu-data/\n")
    for name, default in SOURCES.items():
        source = pathlib.Path(gpt2_dir) / name if gpt2_dir and name.startswith("gpt2") else REPO_ROOT / default
        if not source.is_file():
            sys.exit(f"gpu-check stage: {source} is missing; `python tools/datasets/prepare_data.py gpt2` puts "
                     "GPT-2's files in data/ and `make data` builds data/stdlib/stdlib.jsonl.zst")
        shutil.copy2(source, STAGED / name)
        print(f"staged {STAGED.name}/{name} ({source.stat().st_size / 2**20:.2f} MiB)")


def launch(argv: list, timeout: float, env: dict | None = None) -> dict:
    began = time.perf_counter()
    try:
        done = subprocess.run([sys.executable, *argv], cwd=REPO_ROOT, capture_output=True, text=True,
                              timeout=max(timeout, 1), env=env)
        code, output = done.returncode, done.stdout + done.stderr
    except subprocess.TimeoutExpired as stopped:
        code = None
        output = "".join(o.decode(errors="replace") if isinstance(o, bytes) else (o or "")
                         for o in (stopped.stdout, stopped.stderr))
    return {"exit_code": code, "wall_s": round(time.perf_counter() - began, 1), "output": output}


def run(profile: str, budget: float, data: pathlib.Path) -> dict:
    began = time.perf_counter()
    missing = [name for name in FILES if not (data / name).is_file()]
    if missing:
        return {"error": f"{data} lacks {', '.join(missing)}: run `python -m tools.gpu_check.train_loop --stage` "
                         "before the GPU run and carry .gpu-data"}
    config, steps, log_interval = PROFILES[profile]
    work = pathlib.Path(tempfile.mkdtemp(prefix="gpu-loop-"))
    result = {"profile": profile, "config": config, "steps": steps, "launches": []}
    tokenize = launch(["tools/datasets/preprocess_data.py", "--input", str(data / "stdlib.jsonl.zst"),
                       "--output-prefix", str(work / "stdlib"), "--tokenizer-type", "GPT2BPETokenizer",
                       "--vocab-file", str(data / "gpt2-vocab.json"), "--merge-file", str(data / "gpt2-merges.txt"),
                       "--append-eod", "--workers", str(WORKERS[profile]), "--no-progress"], budget * 0.4)
    result["tokenize"] = {k: v for k, v in tokenize.items() if k != "output"}
    prefix = work / "stdlib_text_document"
    if tokenize["exit_code"] != 0 or not prefix.with_suffix(".bin").is_file():
        result["error"] = f"tokenizing failed (exit code {tokenize['exit_code']})"
        result["log_tail"] = tokenize["output"][-2500:]
        return result
    result["tokens"] = prefix.with_suffix(".bin").stat().st_size // 2  # uint16 ids: GPT-2's vocabulary < 65,536
    flags = {"data-path": prefix, "vocab-file": data / "gpt2-vocab.json", "merge-file": data / "gpt2-merges.txt",
             "tokenizer-type": "GPT2BPETokenizer", "save": work / "ckpt", "load": work / "ckpt",
             "train-iters": steps, "lr-decay-iters": steps, "log-interval": log_interval,
             "checkpoint-factor": steps // 2, "eval-interval": steps // 2, "eval-iters": 2,
             # Split by documents: the standard library's files are large, so 1% of them can be one short file.
             "split": "90,5,5",
             "tensorboard-dir": "null", "log-dir": work / "logs", "keep-last-n-checkpoints": "null"}
    if profile == "tiny":
        flags.update({"train_micro_batch_size_per_gpu": 4, "hidden-size": 32, "num-layers": 1})
    for half, stop_at in (("first", steps // 2), ("resumed", steps)):
        remaining = budget - (time.perf_counter() - began)
        argv = ["deepy.py", "train.py", config, "--set", f"exit-interval={stop_at}" if half == "first" else
                "exit-interval=null"]
        for key, value in flags.items():
            argv += ["--set", f"{key}={value}"]
        # The first launch also saves the 162M model's optimizer states (~2 GB): on the H200 it took 40 s to its save.
        done = launch(argv, remaining * (0.55 if half == "first" else 1))
        losses = [(int(s), float(x)) for s, _, x in LOSS_LINE.findall(done["output"])]
        record = {"half": half, "exit_code": done["exit_code"], "wall_s": done["wall_s"], "losses": losses,
                  "latest": (work / "ckpt" / "latest").read_text().strip() if (work / "ckpt" / "latest").is_file()
                  else None}
        result["launches"].append(record)
        if done["exit_code"] != 0:
            why = "killed at its share of the time limit" if done["exit_code"] is None else \
                f"exit code {done['exit_code']}"
            result["error"] = f"the {half} launch of deepy.py train.py did not finish ({why})"
            result["log_tail"] = done["output"][-2500:]
            break
    first, resumed = (result["launches"] + [None, None])[:2]
    if resumed and resumed["exit_code"] == 0:
        result["resumed_from"] = first["latest"]
        result["resumed_first_logged_step"] = resumed["losses"][0][0] if resumed["losses"] else None
        all_losses = first["losses"] + resumed["losses"]
        result["loss_first"], result["loss_last"] = all_losses[0][1], all_losses[-1][1]
    result["checkpoints"] = sorted(p.name for p in (work / "ckpt").glob("global_step*"))
    result["seconds"] = round(time.perf_counter() - began, 1)
    shutil.rmtree(work, ignore_errors=True)
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json")
    parser.add_argument("--profile", default="162M", choices=list(PROFILES))
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"], help="(DeepSpeed picks it itself)")
    parser.add_argument("--budget", type=float, default=100.0)
    parser.add_argument("--data", default=str(STAGED), help="folder of the staged files (default: .gpu-data)")
    parser.add_argument("--stage", action="store_true", help="copy the files the GPU run needs into .gpu-data/")
    parser.add_argument("--gpt2-dir", help="with --stage: a folder holding gpt2-vocab.json and gpt2-merges.txt")
    cli = parser.parse_args(argv)
    if cli.stage:
        return stage(cli.gpt2_dir)
    if not cli.json:
        parser.error("--json is required (or --stage)")
    result = run(cli.profile, cli.budget, pathlib.Path(cli.data))
    with open(cli.json, "w") as out:
        json.dump(result, out, indent=1)


if __name__ == "__main__":
    main()
