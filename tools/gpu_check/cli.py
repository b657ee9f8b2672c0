"""`make gpu-check`: on a machine with a CUDA GPU, install the carried wheels, run the device tests, time
the training step of every method and long-sequence evaluation, and write one report.

    python -m tools.gpu_check [--out DIR] [--force] [--wheels .whl] [--site /tmp/site]
    python -m tools.gpu_check --device cpu --tiny --out /tmp/smoke     # developers: the code paths on CPU
    TRITON_INTERPRET=1 python -m tools.gpu_check --device cpu --tiny --parts train --out /tmp/smoke  # + `triton`

Without CUDA it prints one line and exits with status 2 before doing anything (the developer flag
`--device cpu --tiny` runs every part at toy sizes on this machine's CPU instead; with TRITON_INTERPRET=1 the
training part also times the `triton` kernel there, in Triton's interpreter: about 30 s a step). The training-loop
part reads `.gpu-data/` (`python -m tools.gpu_check.train_loop --stage` fills it here). Each part runs in its
own process under a time limit, so one that hangs or runs out of memory costs only its share; the parts
together take up to 19 minutes on an H200, so where a command may run 10 minutes at most, run it as three calls
(BUDGETS says which; `--budget PART=SECONDS` changes one part's limit), and the report is rewritten after each,
so a run stopped early still leaves one. The report (report.md,
report.json and the tests' log) goes to --out, by default a new runs/gpu-check/<device>-<profile>-<UTC time>/; a
folder holding a report made on another device or profile (the committed docs/gpu/ for a CPU smoke run) is
refused before anything runs, unless --force.
Exit status 1 when a test failed or a part did not finish, 0 otherwise.
"""
import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

from . import report, tests_part
from .processes import run_whole_group
from megatron.quoting import quote

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
NO_CUDA = 2
# Seconds per part on the GPU (tests, training step, evaluation, the training loop, fla's kernels) and for the
# tiny CPU smoke run. The tests part took 245 s on an H200 (409 tests, 6 workers, 2026-11-27). The train part
# builds its configurations in order of value for half its budget and times rounds in the other half; the eval
# part needs about three minutes for `triton` to reach a million tokens (an estimate: a causal pass there is
# 2e16 attention FLOP, three minutes at 1.1e14 FLOP/s). Every part killed at its limit (plus its grace) would be
# 30 + 15 + 260 + 4 x 15 + 360 + 200 + 140 + 90 = 1,155 s, so where one call may run at most 10 minutes the
# check is three calls: `--parts train eval --budget train=300` (at most 575 s: the numbers first), `--parts
# tests`, `--parts loop fla`. The report is rewritten after each part, so a call stopped early keeps the others.
BUDGETS = {"cuda": {"install": 30, "environment": 15, "tests": 260, "train": 360, "eval": 200, "loop": 140, "fla": 90},
           "tiny": {"install": 45, "environment": 60, "tests": 120, "train": 240, "eval": 120, "loop": 240,
                    "fla": 60}}  # a busy 2-core CPU
# The parts after the tests, in order of value, and the module each runs.
PARTS = {"train": "train_speed", "eval": "eval_memory", "loop": "train_loop", "fla": "fla_kernels"}
GRACE = 15  # a part that watches its own budget gets this long to write its results before it is killed


def cuda_problem() -> str | None:
    """Why this machine cannot run the check, or None. Imports only torch."""
    try:
        import torch
    except ImportError as err:
        return f"torch does not import here ({err})"
    if not torch.cuda.is_available():
        build = f"a CPU-only build of torch {torch.__version__}" if torch.version.cuda is None else \
            f"torch {torch.__version__} (CUDA {torch.version.cuda}) finds no usable device"
        return f"torch.cuda.is_available() is False: {build}"
    return None


def this_device(device: str) -> str:
    """The device a report is made on, as its report.json's environment names it (`gpu`, or a CPU run)."""
    if device == "cpu":
        return "cpu"
    import torch
    return torch.cuda.get_device_name(0)


def report_folder(given: str | None, device: str, profile: str) -> pathlib.Path:
    """--out, or a new folder per run under runs/gpu-check/ (ignored by git): a run never writes over the
    measured reports committed in docs/gpu/ unless told to, and two runs never share a folder."""
    if given is not None:
        return (REPO_ROOT / given).resolve()
    slug = "".join(c if c.isalnum() else "-" for c in device.lower()).strip("-")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    return REPO_ROOT / "runs" / "gpu-check" / f"{slug}-{profile.lower()}-{stamp}"


def replaced_report_problem(out: pathlib.Path, device: str, profile: str) -> str | None:
    """Why writing into `out` would replace a report made elsewhere (another device or profile: a CPU smoke
    run over an H200's numbers), or None. A report of the same device and profile is a rerun and is replaced."""
    existing = out / "report.json"
    if not existing.is_file():
        return None
    try:
        old = json.loads(existing.read_text())
        old_device = old.get("environment", {}).get("gpu") or "cpu"
        old_profile = old.get("profile")
    except (OSError, ValueError, AttributeError) as err:
        return (f"{existing} exists and cannot be read as a report ({quote(str(err))}); it was not replaced. "
                "Give another --out, or --force to write over it.")
    if (old_device, old_profile) == (device, profile):
        return None
    return (f"{out} holds a report made on {old_device} (profile {old_profile}, {old.get('created', 'date unknown')}), "
            f"and this run is on {device} (profile {profile}): it was not replaced. Leave --out out (each run then "
            f"gets its own folder under runs/gpu-check/), give another folder, or add --force to replace it.")


def install_wheels(wheels: pathlib.Path, site: pathlib.Path, env: dict, budget: float) -> dict:
    """pip install the carried wheels into `site` (no index, no dependency resolution: the folder is
    complete, made by `make gpu-wheels`) and put it first on PYTHONPATH for every part."""
    found = sorted(wheels.glob("*.whl"))
    if not found:
        return {"wheels": 0, "note": f"no wheels in {wheels}: using the packages installed here"}
    argv = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
            "--no-cache-dir", "--upgrade", "--target", str(site), *map(str, found)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=budget)
    if done.returncode != 0:
        return {"wheels": len(found), "error": (done.stdout + done.stderr)[-1500:]}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    return {"wheels": len(found), "site": str(site), "names": [p.name for p in found]}


def run_part(name: str, argv: list, env: dict, budget: float, scratch: pathlib.Path) -> dict:
    """`python -m tools.gpu_check.NAME ... --json FILE`; the parsed JSON, or what went wrong."""
    out, log = scratch / f"{name}.json", scratch / f"{name}.log"
    began = time.perf_counter()
    with open(log, "w") as stream:
        code = run_whole_group([sys.executable, "-m", f"tools.gpu_check.{name}", "--json", str(out), *argv],
                               budget + GRACE, cwd=REPO_ROOT, env=env, stdout=stream, stderr=subprocess.STDOUT)
    seconds = round(time.perf_counter() - began, 1)
    if code == 0 and out.is_file():
        return {**json.loads(out.read_text()), "wall_s": seconds}
    why = f"killed at its time limit ({budget + GRACE:.0f} s)" if code is None else f"exit code {code}"
    if out.is_file():  # a part that writes as it goes (fla_kernels) left what it finished
        return {**json.loads(out.read_text()), "error": why, "wall_s": seconds,
                "log_tail": log.read_text(errors="replace")[-2500:]}
    return {"error": why, "wall_s": seconds, "log_tail": log.read_text(errors="replace")[-2500:]}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=None,
                        help="report folder (default: a new runs/gpu-check/<device>-<UTC time>/, never the committed "
                             "docs/gpu/)")
    parser.add_argument("--force", action="store_true",
                        help="write into --out even when it holds a report made on another device or profile")
    parser.add_argument("--wheels", default=".whl", help="wheel folder from `make gpu-wheels` (default: .whl)")
    parser.add_argument("--site", default="/tmp/site", help="where the wheels are installed (default: /tmp/site)")
    parser.add_argument("--parts", nargs="+", default=["tests", *PARTS], choices=["tests", *PARTS])
    parser.add_argument("--tests", nargs="+", default=list(tests_part.FILES), metavar="FILE",
                        help="the test files of the tests part (default: %(default)s)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="developers: `cpu` with --tiny runs the parts on the CPU (no wheels installed)")
    parser.add_argument("--tiny", action="store_true", help="developers: toy sizes, for a smoke run of the code")
    parser.add_argument("--budget", nargs="+", default=[], metavar="PART=SECONDS",
                        help="a part's time limit instead of its default, for a follow-up run of fewer parts "
                             "(e.g. --parts fla eval --budget fla=200 eval=200)")
    cli = parser.parse_args(argv)
    if cli.device == "cpu" and not cli.tiny:
        parser.error("--device cpu runs only with --tiny: the 162M benchmarks are meaningless on a CPU")
    if cli.device == "cuda":
        problem = cuda_problem()
        if problem:
            print(f"gpu-check: no CUDA device here ({problem}); run `make gpu-check` on a machine with a CUDA GPU")
            return NO_CUDA

    profile = "tiny" if cli.tiny else "162M"
    device = this_device(cli.device)
    began, out = time.perf_counter(), report_folder(cli.out, device, profile)
    if not cli.force and (problem := replaced_report_problem(out, device, profile)):
        print(f"gpu-check: {problem}")
        return NO_CUDA
    budgets = dict(BUDGETS["tiny" if cli.tiny else "cuda"])
    for given in cli.budget:
        part, _, seconds = given.partition("=")
        if part not in budgets or not seconds.replace(".", "", 1).isdigit():
            parser.error(f"--budget {given!r}: expected PART=SECONDS with PART one of {', '.join(budgets)}")
        budgets[part] = float(seconds)
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    env.update(PYTHONUNBUFFERED="1", NEOX_TEST_DEVICE=cli.device)  # DeepSpeed picks its accelerator itself
    results = {"command": "python -m tools.gpu_check " + " ".join(argv if argv is not None else sys.argv[1:]),
               "profile": profile, "budgets_s": budgets}
    if cli.device == "cuda":
        results["install"] = install_wheels(REPO_ROOT / cli.wheels, pathlib.Path(cli.site), env, budgets["install"])
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        scratch = pathlib.Path(scratch)
        results["environment"] = _environment(env, budgets["environment"])
        devices = results["environment"].get("gpus", 0)
        if "tests" in cli.parts:
            print(f"gpu-check: tests (limit {budgets['tests']} s)", flush=True)
            results["tests"] = tests_part.run(cli.tiny, devices, env, budgets["tests"], out / "tests.log", cli.tests)
            _write(results, out, began)
        common = ["--profile", profile, "--device", cli.device]
        for part, module in PARTS.items():
            if part in cli.parts:
                print(f"gpu-check: {part} (limit {budgets[part]} s)", flush=True)
                tiny = ["--steps", "2", "--rounds", "2", "--warmup", "1", "--methods", "none", "kerple_log",
                        "alibi", "rotary"] if cli.tiny and part == "train" else []
                results[part] = run_part(module, common + tiny + ["--budget", str(budgets[part])], env,
                                         budgets[part], scratch)
                _write(results, out, began)  # a run stopped later still leaves the parts done so far
    paths = _write(results, out, began)
    ok = report.passed(results)
    print(f"gpu-check: {'passed' if ok else 'FAILED'} in {results['total_s']:.0f} s; report: "
          + ", ".join(str(p.relative_to(REPO_ROOT) if p.is_relative_to(REPO_ROOT) else p) for p in paths))
    return 0 if ok else 1


def _write(results: dict, out: pathlib.Path, began: float) -> list:
    results["total_s"] = round(time.perf_counter() - began, 1)
    return report.write(results, out)


def _environment(env: dict, budget: float) -> dict:
    try:
        done = subprocess.run([sys.executable, "-m", "tools.gpu_check.environment"], cwd=REPO_ROOT, env=env,
                              capture_output=True, text=True, timeout=budget)
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, json.JSONDecodeError, IndexError):
        return {"error": "the environment probe failed (does deepspeed import?)"}
