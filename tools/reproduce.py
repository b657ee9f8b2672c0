#!/usr/bin/env python
"""Reproduce the KERPLE paper's experiment end to end from one sweep YAML, and write the report.

    python tools/reproduce.py configs/reproduce/cpu-mini.yml                  # the CPU grid (make reproduce)
    python tools/reproduce.py configs/reproduce/cpu-mini.yml --datasets stdlib prose
    python tools/reproduce.py configs/reproduce/paper.yml                     # 162M / 512 / 50k, GPUs
    python tools/reproduce.py SWEEP.yml --dry-run | --report-only

For every (dataset, method, seed) of the grid it prepares the data, trains through
`deepy.py train.py`, evaluates at every length through `deepy.py evaluate.py` (the commands a GPU user
runs by hand), evaluates the windowed baseline, and then writes the report (Tables 3-5, Figures 2-5,
perplexity versus length) with tools/analysis. It is resumable: a run with a checkpoint at its final
step and a complete result file is skipped, an interrupted training resumes from its last checkpoint,
and a failed run is reported while the others go on. Paths in the sweep YAML are relative to the
repository root; everything a run writes goes under the sweep's `work_dir`.
"""
import argparse
import concurrent.futures
import dataclasses
import datetime
import hashlib
import json
import os
import pathlib
import platform
import shlex
import socket
import subprocess
import sys
import threading
import time

import numpy as np
import yaml

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from megatron.evaluation.results import ResultFileError  # noqa: E402
from megatron.neox_arguments import NeoXArgs, NeoXArgsError, run_cli  # noqa: E402

WINDOW_SUFFIX = "+window"
BYTE_LEVEL = {"tokenizer-type": "ByteLevelTokenizer"}
COMPLEX_KERNELS = ("kerple_log3", "kerple_bias_weight")  # the paper's Table 5
BOUNDED_RATIO = 2.0    # claim 1: "blows up" = perplexity at the longest length >= 2x that at the train length
COMPETITIVE = 0.03     # claim 3: T5 within 3% of KERPLE-log's perplexity at the train length
LONG_RATIO = 8         # "long lengths": at least 8x the train length (the paper's 4096+ at 512)


class SweepError(NeoXArgsError):
    """A sweep YAML that cannot be run as written."""


# ----------------------------------------------------------------------------------------- the sweep
@dataclasses.dataclass
class Dataset:
    name: str
    prefix: str                   # the data-path: <dir>/<name>_text_document(.bin/.idx)
    tokenizer: dict               # NeoX tokenizer keys, for preprocessing and training alike
    builder: str | None = None    # "stdlib": tools/datasets/build_default_corpus.py builds it
    source: str | None = None     # a raw corpus tools/datasets/preprocess_data.py tokenizes
    stand_in: str | None = None   # dataset used instead when this one is not here (Pile -> stand-in)
    paper: str | None = None      # the paper's dataset printed beside this one

    def ready(self) -> bool:
        return all(pathlib.Path(self.prefix + ext).is_file() for ext in (".bin", ".idx"))


@dataclasses.dataclass
class Sweep:
    path: pathlib.Path
    name: str
    scale: str
    profile: list
    methods: list
    seeds: list
    datasets: list                # the grid's datasets (names in `data`)
    data: dict                    # name -> Dataset
    evaluation: dict              # NeoX evaluation keys of every run
    overrides: dict               # NeoX keys set on every run
    windowed_baseline: str | None
    kernel_figures: list
    position_length: int | None
    position_methods: list
    work_dir: pathlib.Path
    report_dir: pathlib.Path
    commentary: pathlib.Path | None
    jobs: int
    threads: int


SWEEP_KEYS = {"name", "scale", "profile", "methods", "seeds", "datasets", "data", "evaluation", "set",
              "windowed_baseline", "kernel_figures", "position_length", "position_methods", "work_dir",
              "report_dir", "commentary", "jobs", "threads"}
DATASET_KEYS = {"prefix", "tokenizer", "builder", "source", "stand_in", "paper"}


def load_sweep(path) -> Sweep:
    path = pathlib.Path(path)
    try:
        spec = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise SweepError(f"sweep file {path} does not exist; give one of configs/reproduce/*.yml") from None
    except yaml.YAMLError as err:
        raise SweepError(f"sweep file {path} is not valid YAML: {err}") from None

    def fail(key, message):
        raise SweepError(f"{path}: `{key}`: {message}")

    if not isinstance(spec, dict):
        fail("(top level)", "the file must hold a mapping of sweep keys")
    unknown = sorted(set(spec) - SWEEP_KEYS)
    if unknown:
        fail(unknown[0], f"unknown key; the sweep keys are {', '.join(sorted(SWEEP_KEYS))}")
    for key in ("name", "scale", "profile", "methods", "seeds", "datasets", "data", "evaluation"):
        if not spec.get(key):
            fail(key, "is required and must not be empty")
    data = {}
    for name, entry in spec["data"].items():
        if not isinstance(entry, dict) or set(entry) - DATASET_KEYS:
            fail(f"data.{name}", f"must be a mapping with keys among {', '.join(sorted(DATASET_KEYS))}")
        prefix = entry.get("prefix", f"data/{name}/{name}_text_document")
        if pathlib.Path(prefix).name != f"{name}_text_document":
            fail(f"data.{name}.prefix", f"{prefix!r} must end in '{name}_text_document' (evaluate.py names "
                 "results after the data file, so the file name must be the dataset's name)")
        if entry.get("builder") not in (None, "stdlib"):
            fail(f"data.{name}.builder", "the only builder is 'stdlib' (the CPython library corpus)")
        data[name] = Dataset(name, prefix, dict(entry.get("tokenizer") or BYTE_LEVEL), entry.get("builder"),
                             entry.get("source"), entry.get("stand_in"), entry.get("paper"))
    for name in spec["datasets"]:
        if name not in data:
            fail("datasets", f"{name!r} is not defined under `data` (defined: {', '.join(data)})")
    for name, dataset in data.items():
        if dataset.stand_in and dataset.stand_in not in data:
            fail(f"data.{name}.stand_in", f"{dataset.stand_in!r} is not defined under `data`")
    from megatron.neox_arguments.groups import POS_EMB_CHOICES
    for method in spec["methods"]:
        if method not in POS_EMB_CHOICES:
            fail("methods", f"{method!r} is not a pos-emb; choose from {', '.join(POS_EMB_CHOICES)}")
    for key in ("seeds",):
        if not all(isinstance(s, int) for s in spec[key]):
            fail(key, "must be a list of integers")
    windowed = spec.get("windowed_baseline")
    if windowed and windowed not in spec["methods"]:
        fail("windowed_baseline", f"{windowed!r} must be one of the grid's methods")
    evaluation = {k.replace("-", "_"): v for k, v in spec["evaluation"].items()}
    position_length = spec.get("position_length")
    if position_length and position_length not in (evaluation.get("eval_lengths") or []):
        fail("position_length", f"{position_length} must be one of evaluation.eval-lengths")
    if position_length and "position" not in (evaluation.get("eval_modes") or []):
        fail("position_length", "needs `position` in evaluation.eval-modes")
    return Sweep(
        path=path, name=spec["name"], scale=" ".join(str(spec["scale"]).split()), profile=list(spec["profile"]),
        methods=list(spec["methods"]), seeds=list(spec["seeds"]), datasets=list(spec["datasets"]), data=data,
        evaluation=evaluation, overrides={k.replace("-", "_"): v for k, v in (spec.get("set") or {}).items()},
        windowed_baseline=windowed, kernel_figures=list(spec.get("kernel_figures") or []),
        position_length=position_length, position_methods=list(spec.get("position_methods") or []),
        work_dir=pathlib.Path(spec.get("work_dir", f"runs/reproduce/{spec['name']}")),
        report_dir=pathlib.Path(spec.get("report_dir", f"runs/reproduce/{spec['name']}/report")),
        commentary=pathlib.Path(spec["commentary"]) if spec.get("commentary") else None,
        jobs=int(spec.get("jobs", 1)), threads=int(spec.get("threads", 1)))


# ------------------------------------------------------------------------------------------ the runs
@dataclasses.dataclass
class Run:
    """One (dataset, method, seed); a windowed run re-evaluates its base run's checkpoint."""
    sweep: Sweep
    dataset: Dataset
    method: str
    seed: int
    base: "Run | None" = None     # set for the windowed baseline

    @property
    def label(self) -> str:
        return self.method + (WINDOW_SUFFIX if self.base else "")

    @property
    def directory(self) -> pathlib.Path:
        return self.sweep.work_dir / self.dataset.name / self.label / f"seed{self.seed}"

    @property
    def checkpoints(self) -> pathlib.Path:
        return (self.base or self).directory / "checkpoints"

    @property
    def results_dir(self) -> pathlib.Path:
        return self.directory / "eval"

    def result_method(self) -> str:
        """The method name evaluate.py writes into the result file."""
        return self.method + (f"{WINDOW_SUFFIX}{self.args().seq_length}" if self.base else "")

    def __str__(self):
        return f"{self.dataset.name}/{self.label}/seed{self.seed}"

    def training_overrides(self) -> dict:
        """NeoX keys of this run on top of the profile (the same for training and evaluation)."""
        return {**self.sweep.overrides, **{k.replace("-", "_"): v for k, v in self.dataset.tokenizer.items()},
                "pos_emb": self.method, "seed": self.seed, "data_path": self.dataset.prefix,
                "save": str(self.checkpoints), "load": str(self.checkpoints),
                "tensorboard_dir": str((self.base or self).directory / "tensorboard"),
                "log_dir": str((self.base or self).directory / "logs"),
                # Own sample-index cache: parallel runs of one seed would otherwise write the same files.
                "data_cache_path": str((self.base or self).directory / "data_cache")}

    def evaluation_overrides(self) -> dict:
        overrides = {**self.training_overrides(), **self.sweep.evaluation,
                     "eval_results_dir": str(self.results_dir)}
        if self.base:
            overrides["attention_window"] = self.args().seq_length
        return overrides

    def args(self, overrides=None) -> NeoXArgs:
        return NeoXArgs.from_ymls(self.sweep.profile, overrides or self.training_overrides(), world_size=1)


def plan_runs(sweep: Sweep, datasets) -> list[Run]:
    """Seed-major order: a grid cut short still compares every method on the same seeds."""
    runs = []
    for seed in sweep.seeds:
        for dataset in datasets:
            for method in sweep.methods:
                run = Run(sweep, dataset, method, seed)
                runs.append(run)
                if method == sweep.windowed_baseline:
                    runs.append(Run(sweep, dataset, method, seed, base=run))
    return runs


def trained_step(run: Run) -> int | None:
    from megatron.checkpointing import checkpoint_steps
    steps = checkpoint_steps(run.checkpoints)
    return steps[-1] if steps else None


def finished_result(run: Run, train_iters: int) -> pathlib.Path | None:
    """The run's result file if it scores the final checkpoint at every (length, mode) of the plan, on
    the split, chunks and chunk seed the sweep asks for."""
    from megatron.evaluation.results import load_result
    plan = run.sweep.evaluation
    lengths, modes = plan.get("eval_lengths") or [], plan.get("eval_modes") or ["nonoverlap"]
    settings = {"split": plan.get("eval_split"), "eval_seed": plan.get("eval_seed"),
                "eval_chunks": plan.get("eval_chunks")}
    for path in sorted(run.results_dir.glob("*.json")):
        try:
            document = load_result(path)
        except ResultFileError:
            continue
        have = {(r["length"], r["mode"]) for r in document["results"]}
        complete = all((L, m) in have for L in lengths for m in modes)
        same = all(v is None or document["evaluation"].get(k) == v for k, v in settings.items())
        if document["run"]["checkpoint_step"] == train_iters and complete and same:
            return path
    return None


def training_config_hash(args: NeoXArgs) -> str:
    """Hash of the keys the run's configs set, leaving out those that do not change the trained model
    (evaluation, logging, launcher); keys added to the config system later do not change it."""
    from megatron.neox_arguments import groups
    ignored = {f.name for g in (groups.EvaluationArgs, groups.LoggingArgs, groups.LauncherArgs)
               for f in dataclasses.fields(g)}
    values = {k: v for k, v in args.user_values().items() if k not in ignored}
    return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def check_training_config(run: Run, args: NeoXArgs) -> str:
    """The hash of the run's training config; a RunFailed when its folder already holds checkpoints
    trained with another one (the sweep or profile changed since): those are never reused silently."""
    owner = run.base or run
    identity, digest = owner.directory / "training_config.json", training_config_hash(args)
    stored = json.loads(identity.read_text())["config_hash"] if identity.is_file() else digest
    if trained_step(owner) is not None and stored != digest:
        raise RunFailed(f"{owner.checkpoints} holds checkpoints of a different training config (the sweep or "
                        "profile changed since); delete that run folder to retrain it, or give the sweep "
                        "another work_dir")
    return digest


# ------------------------------------------------------------------------------------ running things
class Progress:
    """Runs done / left and an ETA from the runs finished in this invocation, printed as it goes."""

    def __init__(self, total: int, jobs: int):
        self.total, self.jobs, self.done, self.skipped, self.failed = total, jobs, 0, 0, 0
        self.durations, self.started, self.lock = [], time.time(), threading.Lock()

    def finish(self, run, seconds: float | None, failed: bool = False) -> None:
        with self.lock:
            self.done += 1
            self.failed += failed
            if seconds is None:
                self.skipped += 1
            elif not failed:
                self.durations.append(seconds)
            left = self.total - self.done
            eta = (f"ETA {_duration(np.mean(self.durations) * left / self.jobs)}" if self.durations and left
                   else "ETA after the first run" if left else "all done")
            status = "FAILED" if failed else "already finished" if seconds is None else f"{_duration(seconds)}"
            print(f"[{self.done}/{self.total}] {run}: {status} | {left} left, {self.skipped} skipped, "
                  f"{self.failed} failed | elapsed {_duration(time.time() - self.started)} | {eta}", flush=True)


def _duration(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(seconds)))


class RunFailed(Exception):
    """One run could not finish; the message says which step and where its log is."""


def launch(script: str, run: Run, overrides: dict, log: pathlib.Path, threads: int) -> None:
    """`python deepy.py SCRIPT PROFILE... --set k=v ...` with its output in `log`."""
    command = launch_command(script, run.sweep.profile, {**overrides, "master_port": free_port()})
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads), PYTHONUNBUFFERED="1")
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as out:
        out.write(f"\n$ {shlex.join(command)}\n")
        out.flush()
        code = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, env=env, cwd=REPO_ROOT).returncode
    if code != 0:
        raise RunFailed(f"{script} exited with code {code}; last lines of {log}:\n" + _tail(log))


def launch_command(script: str, profile: list, overrides: dict) -> list[str]:
    sets = [arg for key, value in overrides.items() for arg in ("--set", f"{key}={_yaml_text(value)}")]
    return [sys.executable, "deepy.py", script, *profile, *sets]


def _yaml_text(value) -> str:
    """The value as `--set` reads it back (YAML): strings bare where YAML keeps them strings."""
    if isinstance(value, str) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)


def free_port() -> int:
    """A free rendezvous port, so parallel jobs (and other users' runs) never collide on 29500."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _tail(path: pathlib.Path, lines: int = 6) -> str:
    """The log's last lines, without the launcher's and libraries' noise, each cut to a readable width."""
    noise = ("[INFO]", "[WARNING]", "[ERROR] [launch.py", "warnings.warn", "UserWarning")
    kept = [line for line in path.read_text(errors="replace").splitlines() if not any(n in line for n in noise)]
    return "\n".join("    " + line[:300] for line in kept[-lines:])


def execute(run: Run, threads: int) -> float | None:
    """Train (unless a base run's checkpoint is reused) and evaluate one run; None when already finished."""
    args = run.args()
    digest = check_training_config(run, args)
    done = finished_result(run, args.train_iters)
    if done and (run.base or trained_step(run) == args.train_iters):
        return None
    began = time.time()
    if not run.base:
        train(run, args, digest, threads)
    elif trained_step(run.base) != args.train_iters:
        raise RunFailed(f"its base run {run.base} has no checkpoint at step {args.train_iters}")
    for stale in run.results_dir.glob("*.json"):  # one result file per run: a new checkpoint replaces the old
        stale.unlink()
    launch("evaluate.py", run, run.evaluation_overrides(), run.directory / "evaluate.log", threads)
    if not finished_result(run, args.train_iters):
        raise RunFailed(f"evaluate.py finished but {run.results_dir} holds no complete result for step "
                        f"{args.train_iters}; see {run.directory / 'evaluate.log'}")
    return time.time() - began


def train(run: Run, args: NeoXArgs, digest: str, threads: int) -> None:
    step = trained_step(run)
    if step == args.train_iters:
        return
    if step is not None and step > args.train_iters:
        raise RunFailed(f"{run.checkpoints} has a checkpoint at step {step}, past train-iters "
                        f"{args.train_iters}; delete the run folder or raise train-iters")
    run.directory.mkdir(parents=True, exist_ok=True)
    identity = {"config_hash": digest, "commit": git_commit()[0]}
    (run.directory / "training_config.json").write_text(json.dumps(identity))
    launch("train.py", run, run.training_overrides(), run.directory / "train.log", threads)
    if trained_step(run) != args.train_iters:
        raise RunFailed(f"train.py stopped without a checkpoint at step {args.train_iters} (preempted?); "
                        f"re-run the sweep to resume it; see {run.directory / 'train.log'}")


def run_grid(runs: list[Run], jobs: int, threads: int) -> dict:
    """Every run through `execute`, `jobs` at a time; returns {run: error}. A windowed run follows its
    base run in the same worker, so no worker waits idle for another's checkpoint."""
    progress, failures = Progress(len(runs), jobs), {}
    follows = {id(r.base): r for r in runs if r.base}
    print(f"{len(runs)} runs, {jobs} at a time, {threads} thread(s) each", flush=True)

    def one(run):
        try:
            progress.finish(run, execute(run, threads))
        except Exception as err:  # noqa: BLE001 - whatever stops one run, the others go on
            failures[str(run)] = str(err) if isinstance(err, (RunFailed, NeoXArgsError)) else repr(err)
            print(f"FAILED {run}: {failures[str(run)]}", flush=True)
            progress.finish(run, 0.0, failed=True)
        follow = follows.get(id(run))
        if follow and str(run) in failures:
            failures[str(follow)] = f"not evaluated: its base run {run} failed"
            progress.finish(follow, 0.0, failed=True)
        elif follow:
            one(follow)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        for run in runs:
            if not run.base:
                pool.submit(one, run)
    return failures


# ------------------------------------------------------------------------------------------ the data
def prepare_data(sweep: Sweep, names: list[str]) -> list[Dataset]:
    """The datasets to run, built when missing; absent ones are skipped (or replaced by their stand-in)."""
    chosen = []
    for name in names:
        dataset = sweep.data[name]
        if not dataset.ready():
            if dataset.builder == "stdlib":
                build_stdlib(dataset)
            elif dataset.source and pathlib.Path(dataset.source).exists():
                preprocess(dataset)
            else:
                missing = dataset.source or f"{dataset.prefix}.bin/.idx"
                if dataset.stand_in:
                    print(f"dataset {name}: {missing} is not here; using its stand-in {dataset.stand_in}")
                    chosen += [d for d in prepare_data(sweep, [dataset.stand_in]) if d not in chosen]
                else:
                    print(f"dataset {name}: skipped: {missing} is not here (the shared corpora exist only in "
                          "the team's checkout; Pile subsets must be tokenized into that prefix with "
                          "tools/datasets/preprocess_data.py)")
                continue
        if dataset not in chosen:
            chosen.append(dataset)
    return chosen


def _tokenizer_flags(dataset: Dataset) -> list[str]:
    return [arg for key, value in dataset.tokenizer.items() for arg in (f"--{key.replace('_', '-')}", str(value))]


def build_stdlib(dataset: Dataset) -> None:
    prefix = pathlib.Path(dataset.prefix)
    print(f"dataset {dataset.name}: building the CPython standard-library corpus into {prefix}", flush=True)
    _run_tool(["tools/datasets/build_default_corpus.py", "--output-dir", str(prefix.parent),
               "--name", dataset.name, "--no-progress", *_tokenizer_flags(dataset)])


def preprocess(dataset: Dataset) -> None:
    print(f"dataset {dataset.name}: tokenizing {dataset.source} into {dataset.prefix}", flush=True)
    _run_tool(["tools/datasets/preprocess_data.py", "--input", dataset.source, "--output-prefix",
               dataset.prefix.removesuffix("_text_document"), "--append-eod", "--no-progress",
               *_tokenizer_flags(dataset)])


def _run_tool(argv: list[str]) -> None:
    code = subprocess.run([sys.executable, *argv], cwd=REPO_ROOT).returncode
    if code != 0:
        raise SweepError(f"data preparation failed ({shlex.join(argv)} exited with code {code}); see its "
                         "message above")


# ---------------------------------------------------------------------------------------- the report
def git_commit() -> tuple[str, bool]:
    """(HEAD commit, whether tracked files differ from it)."""
    def git(*argv):
        return subprocess.run(["git", *argv], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()
    return git("rev-parse", "HEAD") or "unknown", bool(git("status", "--porcelain", "--untracked-files=no"))


def collect_documents(runs: list[Run]) -> list[dict]:
    """The result files of the finished runs whose checkpoints match the sweep's current config."""
    from megatron.evaluation.results import load_result
    documents = []
    for run in runs:
        args = run.args()
        try:
            check_training_config(run, args)
        except RunFailed:
            continue
        path = finished_result(run, args.train_iters)
        if path:
            documents.append(load_result(path))
    return documents


def write_report(sweep: Sweep, runs: list[Run], failures: dict, command: str,
                 rerendered: bool = False) -> pathlib.Path:
    from tools.analysis.make_tables import build_table3, render_csv, render_markdown
    from tools.analysis.plot_common import save_figure
    from tools.analysis.plot_lengths import plot_perplexity_vs_length

    documents = collect_documents(runs)
    if not documents:
        raise SweepError(f"no finished runs of this sweep (as configured now) under {sweep.work_dir} to report "
                         "on; run the sweep first")
    out = sweep.report_dir
    out.mkdir(parents=True, exist_ok=True)
    paper_map = {d.name: d.paper for d in sweep.data.values() if d.paper}
    reference = "kerple_log" if "kerple_log" in sweep.methods else sweep.methods[0]
    figures = lambda fig, stem: [p.unlink() for p in save_figure(fig, out / stem) if p.suffix != ".png"]  # noqa: E731

    base_docs = [d for d in documents if d["run"]["pos_emb"] not in COMPLEX_KERNELS or d["run"]["pos_emb"] == reference]
    table3 = build_table3(base_docs, "nonoverlap", reference, 0.05, paper_map)
    (out / "table3.csv").write_text(render_csv(table3))
    figures(plot_perplexity_vs_length(documents), "ppl_vs_length")
    table5 = None
    if any(m in COMPLEX_KERNELS for m in sweep.methods):
        complex_docs = [d for d in documents if d["run"]["pos_emb"] in COMPLEX_KERNELS + (reference,)
                        and not d["run"]["attention_window"]]
        table5 = build_table3(complex_docs, "nonoverlap", reference, 0.05, {}) if complex_docs else None

    trained = [r for r in runs if not r.base]
    sections = [_header(sweep, runs, documents, command, rerendered), _claims_section(sweep, table3, documents),
                "## Table 3: perplexity by evaluation length\n", f"_Scale: {sweep.scale}_\n",
                render_markdown(table3), "![perplexity versus length](ppl_vs_length.png)\n"]
    if table5:
        sections += ["## Table 5: the complex kernels\n", f"_Scale: {sweep.scale}_\n", render_markdown(table5)]
    sections.append(_speed_section(sweep, trained))
    sections.append(_training_section(sweep, trained, figures))
    sections.append(_kernel_section(sweep, trained, figures))
    sections.append(_position_section(sweep, documents, figures))
    sections.append(_status_section(runs, documents, failures))
    if sweep.commentary and sweep.commentary.is_file():
        sections.append(sweep.commentary.read_text())
    report = out / "report.md"
    temporary = report.with_suffix(".md.tmp")
    temporary.write_text("\n".join(s.rstrip() + "\n" for s in sections if s))
    os.replace(temporary, report)
    return report


def _header(sweep, runs, documents, command, rerendered) -> str:
    commit, dirty = git_commit()
    args = runs[0].args()
    params = _parameter_count(runs[0])
    trained_commits = sorted({json.loads((r.directory / "training_config.json").read_text()).get("commit", "?")[:10]
                              for r in runs if not r.base and (r.directory / "training_config.json").is_file()})
    evaluation = sweep.evaluation
    datasets = sorted({d["run"]["dataset"] for d in documents})
    lines = [
        f"# KERPLE reproduction: `{sweep.name}`\n",
        f"**Scale: {sweep.scale}** These are this reproduction's numbers; wherever the paper's numbers "
        "appear they sit in columns labelled *paper* and come from the KERPLE paper (162M model, 512 "
        "tokens, Pile subsets), not from this run.\n",
        f"- Command: `{command}`" + (" (this file was re-rendered from its finished runs with `--report-only`)"
                                     if rerendered else ""),
        f"- Commit: `{commit}`" + (" (with uncommitted changes to tracked files)" if dirty else "")
        + (f"; runs trained at {', '.join(trained_commits)}" if trained_commits else ""),
        f"- Generated: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on "
        f"{platform.machine()} / {os.cpu_count()} CPU cores, Python {platform.python_version()}",
        f"- Sweep: `{sweep.path}`; profile {', '.join(f'`{p}`' for p in sweep.profile)}",
        f"- Model: {args.num_layers} layers, hidden {args.hidden_size}, {args.num_attention_heads} heads, "
        f"{params:,} parameters (kerple_log), {args.precision}",
        f"- Training: {args.train_iters:,} steps x {args.train_batch_size} sequences x {args.seq_length} tokens "
        f"= {args.train_iters * args.train_batch_size * args.seq_length:,} tokens per run; lr {args.lr:g} "
        f"({args.lr_decay_style}, warmup {args.warmup:g}); seeds {', '.join(map(str, sweep.seeds))}",
        f"- Evaluation: non-overlapping chunks of L tokens, lengths {evaluation.get('eval_lengths')}, "
        f"{evaluation.get('eval_chunks') or 'all'} chunks per length from the `{evaluation.get('eval_split', 'test')}` "
        "split, the same chunks for every model and seed",
        "- Datasets: " + "; ".join(_dataset_line(sweep.data[name]) for name in datasets if name in sweep.data),
        f"- Methods: {', '.join(sweep.methods)}"
        + (f"; windowed baseline: {sweep.windowed_baseline} evaluated with attention-window = {args.seq_length} "
           "(training at that length masks nothing, so its checkpoint is the unwindowed run's)"
           if sweep.windowed_baseline else ""),
        "",
    ]
    return "\n".join(lines)


def _dataset_line(dataset: Dataset) -> str:
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    tokens = 0
    if dataset.ready():
        index = IndexedDataset(dataset.prefix)  # keep it alive: its lengths are a view of its memory map
        tokens = int(index.sequence_lengths.sum())
    paper = f", stand-in for the paper's {dataset.paper}" if dataset.paper else ""
    return f"`{dataset.name}` ({tokens:,} tokens, {dataset.tokenizer.get('tokenizer-type')}{paper})"


def _parameter_count(run: Run) -> int:
    from megatron.model import GPTModel
    from megatron.tokenizer import build_tokenizer
    args = run.args({**run.training_overrides(), "pos_emb": "kerple_log"})
    return sum(p.numel() for p in GPTModel(args, build_tokenizer(args).padded_vocab_size).parameters())


# Claims ------------------------------------------------------------------------------------------
@dataclasses.dataclass
class Cells:
    """Table 3 of one dataset, read the way the claims are stated (reference: KERPLE-log)."""
    table: object
    dataset: str

    def methods(self) -> list:
        return self.table.methods[self.dataset]

    def ppl(self, method, length) -> float | None:
        cell = self.table.cells.get((self.dataset, method, length))
        return cell.ppl_mean if cell else None

    def ratio(self, method, length, train_length) -> float | None:
        a, b = self.ppl(method, train_length), self.ppl(method, length)
        return None if a is None or b is None else b / a

    def comparison(self, method, length):
        cell = self.table.cells.get((self.dataset, method, length))
        return cell.comparison if cell else None

    def p(self, method, length) -> str:
        c = self.comparison(method, length)
        return f"p = {c.p_value:.3g}" if c and c.p_value is not None else "no test"

    def reference_better(self, method, length) -> bool:
        """KERPLE-log's loss is significantly lower than `method`'s (the table's dagger)."""
        c = self.comparison(method, length)
        return bool(c and c.dagger)

    def reference_worse(self, method, length) -> bool:
        c = self.comparison(method, length)
        return bool(c and c.p_value is not None and c.p_value < self.table.alpha and c.other_loss < c.reference_loss)


def claim_verdicts(table, documents, sweep) -> dict:
    """{dataset: [(claim, verdict, evidence)]}: the paper's four claims judged by the fixed rules in
    CLAIM_RULES."""
    verdicts = {}
    for dataset in table.datasets:
        T = table.train_length.get(dataset)
        if T is None or T not in table.lengths or table.reference != "kerple_log":
            continue
        cells = Cells(table, dataset)
        verdicts[dataset] = [_claim1(cells, T), _claim2(cells, T), _claim3(cells, T),
                             _claim4(documents, sweep, dataset, T)]
    return verdicts


def _claim1(cells, T):
    claim = "1. Sinusoidal and rotary blow up beyond the training length; ALiBi, T5, KERPLE stay bounded"
    longest = max(cells.table.lengths)
    blowing = [m for m in ("sinusoidal", "rotary") if m in cells.methods()]
    bounded = [m for m in ("alibi", "t5", "kerple_log", "kerple_power") if m in cells.methods()]
    if not blowing or not bounded:
        return claim, "not assessed", "needs sinusoidal or rotary, and ALiBi, T5 or KERPLE"
    at_longest = {m: cells.ratio(m, longest, T) for m in blowing}
    worst = {m: max(cells.ratio(m, L, T) or 0 for L in cells.table.lengths if L > T) for m in bounded}
    evidence = (f"ppl(L={longest}) / ppl(L={T}): " + ", ".join(f"{m} {r:.3g}x" for m, r in at_longest.items() if r)
                + "; largest ppl(L) / ppl(L={T}) over all L: ".replace("{T}", str(T))
                + ", ".join(f"{m} {r:.3g}x" for m, r in worst.items()))
    blow = sum(r is not None and r >= BOUNDED_RATIO for r in at_longest.values())
    stay = sum(r < BOUNDED_RATIO for r in worst.values())
    verdict = ("confirmed" if blow == len(blowing) and stay == len(bounded) else
               "not confirmed" if blow == 0 or stay == 0 else "partly confirmed")
    return claim, verdict, evidence


def _claim2(cells, T):
    claim = "2. KERPLE-log is at least as good as ALiBi at every length and better at long lengths"
    if "alibi" not in cells.methods():
        return claim, "not assessed", "needs alibi"
    lengths = [L for L in cells.table.lengths if cells.ppl("kerple_log", L) and cells.ppl("alibi", L)]
    long = [L for L in lengths if L >= LONG_RATIO * T]
    alibi_better = [L for L in lengths if cells.reference_worse("alibi", L)]
    log_better = [L for L in long if cells.reference_better("alibi", L)]
    log_lower = [L for L in long if cells.ppl("kerple_log", L) < cells.ppl("alibi", L)]
    evidence = "KERPLE-log vs ALiBi ppl: " + "; ".join(
        f"L={L}: {cells.ppl('kerple_log', L):.3g} vs {cells.ppl('alibi', L):.3g} ({cells.p('alibi', L)})"
        for L in lengths)
    if alibi_better:
        verdict = f"not confirmed (ALiBi significantly better at L = {alibi_better})"
    elif long and log_better == long:
        verdict = "confirmed"
    elif long and log_lower == long:
        verdict = "partly confirmed (lower at every long length, not significantly at all of them)"
    else:
        verdict = "not confirmed (not better at long lengths)"
    return claim, verdict, evidence


def _claim3(cells, T):
    claim = "3. T5 is competitive near the training length and degrades at long lengths"
    longest = max(cells.table.lengths)
    values = [cells.ppl(m, L) for m in ("t5", "kerple_log") for L in (T, longest)]
    if "t5" not in cells.methods() or None in values:
        return claim, "not assessed", f"needs T5 and KERPLE-log at L={T} and L={longest}"
    t5_T, t5_long, log_T, log_long = values
    competitive = t5_T <= log_T * (1 + COMPETITIVE) or not cells.reference_better("t5", T)
    degrades = cells.reference_better("t5", longest) and t5_long / t5_T > log_long / log_T
    evidence = (f"L={T}: T5 {t5_T:.3g} vs KERPLE-log {log_T:.3g} ({cells.p('t5', T)}); L={longest}: T5 "
                f"{t5_long:.3g} vs {log_long:.3g} ({cells.p('t5', longest)}); ppl(L={longest}) / ppl(L={T}): "
                f"T5 {t5_long / t5_T:.3g}, KERPLE-log {log_long / log_T:.3g}")
    verdict = ("confirmed" if competitive and degrades else
               "partly confirmed" if competitive or degrades else "not confirmed")
    return claim, verdict, evidence


def _claim4(documents, sweep, dataset, T):
    claim = "4. KERPLE-log's position-wise loss keeps falling past the training length, below the windowed baseline"
    L = sweep.position_length
    if not L or sweep.windowed_baseline != "kerple_log":
        return claim, "not assessed", "needs position_length and windowed_baseline: kerple_log"
    curves = {False: {}, True: {}}  # windowed? -> seed -> position loss
    for doc in documents:
        run = doc["run"]
        record = next((r for r in doc["results"] if r["length"] == L and r["mode"] == "position"
                       and "skipped" not in r), None)
        if run["dataset"] == dataset and run["pos_emb"] == "kerple_log" and record:
            curves[bool(run["attention_window"])][run["seed"]] = np.array(record["position_loss"])
    seeds = sorted(set(curves[False]) & set(curves[True]))
    if not seeds:
        return claim, "not assessed", f"no position-wise results at L={L} for kerple_log and its windowed run"
    from scipy import stats
    full = np.array([curves[False][s][T:].mean() for s in seeds])
    windowed = np.array([curves[True][s][T:].mean() for s in seeds])
    tail = max(T, L // 8)
    near = np.mean([curves[False][s][T:2 * T].mean() for s in seeds])
    far = np.mean([curves[False][s][-tail:].mean() for s in seeds])
    p = stats.ttest_rel(full, windowed).pvalue if len(seeds) > 1 else float("nan")
    below, falling = full.mean() < windowed.mean(), far < near
    evidence = (f"L={L}, mean ppl over positions {T}..{L - 1}: KERPLE-log {np.exp(full.mean()):.4g} vs windowed "
                f"{np.exp(windowed.mean()):.4g} (paired over {len(seeds)} seeds, p = {p:.3g}); KERPLE-log ppl at "
                f"positions {T}..{2 * T - 1}: {np.exp(near):.4g}, at the last {tail}: {np.exp(far):.4g}")
    verdict = ("confirmed" if below and falling and (p < 0.05 or len(seeds) == 1) else
               "partly confirmed" if below or falling else "not confirmed")
    return claim, verdict, evidence


CLAIM_RULES = (
    f"*blows up*: perplexity at the longest length at least {BOUNDED_RATIO:g}x the method's own perplexity "
    f"at the training length; *bounded*: below {BOUNDED_RATIO:g}x at every length. *Significantly better*: "
    "lower loss by a paired two-sided t-test over seeds (α = 0.05), the dagger of Table 3. *Long lengths*: "
    f"at least {LONG_RATIO}x the training length. T5 *competitive*: within {COMPETITIVE:.0%} of KERPLE-log "
    "at the training length, or not significantly worse; T5 *degrades*: significantly worse than KERPLE-log "
    "at the longest length and its perplexity rises more (or falls less) from the training length than "
    "KERPLE-log's. Claim 4: *below the windowed baseline*: mean loss over positions past the training length "
    "lower than the windowed run's (paired t-test over seeds); *keeps falling*: KERPLE-log's perplexity over "
    "the last max(T, L/8) positions below its perplexity at positions T..2T-1. A claim is *confirmed* when "
    "every part holds, *partly confirmed* when some do."
)


def _claims_section(sweep, table, documents) -> str:
    verdicts = claim_verdicts(table, documents, sweep)
    lines = ["## The paper's four claims at this scale\n",
             f"_Scale: {sweep.scale}_\n",
             "Judged by fixed rules, written into tools/reproduce.py before the runs: " + CLAIM_RULES + "\n"]
    for dataset, rows in verdicts.items():
        lines += [f"**{dataset}**\n", "| claim | verdict | numbers |", "|---|---|---|"]
        lines += [f"| {claim} | **{verdict}** | {evidence} |" for claim, verdict, evidence in rows]
        lines.append("")
    return "\n".join(lines)


# Table 4, training curves, kernels, position-wise ------------------------------------------------
def _speed_section(sweep, trained) -> str:
    from tools.analysis.training_speed import render_table4
    lines = ["## Table 4: training speed\n", f"_Scale: {sweep.scale}_\n"]
    for dataset in sorted({r.dataset.name for r in trained}):
        finished = [r for r in trained if r.dataset.name == dataset and trained_step(r) == r.args().train_iters]
        try:
            lines += [f"**{dataset}** (seconds per step on this shared CPU, {sweep.jobs} run(s) at a time, "
                      f"{sweep.threads} thread(s) each; other work on the machine adds noise)\n",
                      render_table4(_seconds_per_step(finished), with_paper=sweep.data[dataset].paper == "GitHub")]
        except ResultFileError as err:
            lines.append(f"**{dataset}**: no speed table: {err}\n")
    return "\n".join(lines)


def _seconds_per_step(runs) -> dict:
    """{method: [sec/step per run]} by tools/analysis/training_speed; for runs whose monitor logged only
    `train/tokens_per_sec`, sec/step = tokens per step / that rate, with the same rule (median of the
    logged points after the first)."""
    from tools.analysis.training_speed import speed_table
    try:
        return speed_table([f"{r.method}={r.directory / 'tensorboard'}" for r in runs])
    except ResultFileError:
        speeds = {}
        for run in runs:
            args = run.args()
            rates = [v for _, v in _scalar_curves(run.directory / "tensorboard", "train/tokens_per_sec")][1:]
            if not rates:
                raise
            speeds.setdefault(run.method, []).append(args.train_batch_size * args.seq_length / float(np.median(rates)))
        return speeds


def _scalar_curves(folder: pathlib.Path, tag: str):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    points = {}
    for event_dir in sorted({p.parent for p in folder.rglob("events.out.tfevents.*")}):
        events = EventAccumulator(str(event_dir), size_guidance={"scalars": 0}).Reload()
        if tag in events.Tags()["scalars"]:
            points.update({e.step: e.value for e in events.Scalars(tag)})
    return sorted(points.items())


def _training_section(sweep, trained, figures) -> str:
    """Validation loss against step: the evidence that the models were trained well enough to compare."""
    from tools.analysis.plot_common import method_color, plt
    datasets = sorted({r.dataset.name for r in trained})
    fig, axes = plt.subplots(1, len(datasets), figsize=(5.5 * len(datasets), 4), squeeze=False)
    rows = []
    for ax, dataset in zip(axes[0], datasets):
        for method in sweep.methods:
            curves = [_scalar_curves(r.directory / "tensorboard", "valid/loss") for r in trained
                      if r.dataset.name == dataset and r.method == method]
            curves = [c for c in curves if c]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(s for s, _ in c) for c in curves)))
            mean = np.array([np.mean([dict(c)[s] for c in curves]) for s in steps])
            ax.plot(steps, mean, color=method_color(method), marker=".", label=method)
            quarter = next((i for i, s in enumerate(steps) if s >= 0.75 * steps[-1]), len(steps) - 1)
            rows.append(f"| {dataset} | {method} | {len(curves)} | {mean[-1]:.4f} | {mean[quarter]:.4f} "
                        f"(step {steps[quarter]}) | {100 * (mean[quarter] - mean[-1]) / mean[quarter]:.2f}% |")
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats/token, at the train length)")
        ax.set_title(dataset)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    figures(fig, "training_curves")
    return "\n".join([
        "## Training: were the models trained enough to compare?\n",
        f"_Scale: {sweep.scale}_\n",
        "Validation loss at the training length (mean over seeds) during training. A method whose loss "
        "still fell steeply at the end would be compared before it converged; the last column is how much "
        "the loss fell over the last quarter of training.\n",
        "| dataset | method | seeds | final valid loss | valid loss at 75% | fall over the last 25% |",
        "|---|---|---|---|---|---|", *rows, "", "![validation loss during training](training_curves.png)\n"])


def _kernel_section(sweep, trained, figures) -> str:
    from tools.analysis.plot_kernels import KernelPlotError, load_positional_embeddings, plot_kernel
    lines = ["## Figures 2-4: learned kernels\n",
             f"_Scale: {sweep.scale}_\n",
             "The bias b_h(d) each head adds at distance d (first seed), up to the position-wise evaluation "
             "length. The paper (GitHub, 512 tokens) finds KERPLE-log learns several nearly flat kernels, while "
             "power and ALiBi fall steeply.\n"]
    for run in trained:
        if run.method not in sweep.kernel_figures or run.seed != sweep.seeds[0]:
            continue
        args = run.args()
        if trained_step(run) != args.train_iters:
            continue
        try:
            modules, step = load_positional_embeddings(args)
        except (KernelPlotError, NeoXArgsError) as err:
            lines.append(f"- {run}: no kernel figure: {err}")
            continue
        max_distance = sweep.position_length or 4 * args.seq_length
        title = f"{run.dataset.name}: {run.method} kernel (seed {run.seed}, step {step}, trained at {args.seq_length})"
        stem = f"kernel_{run.dataset.name}_{run.method}"
        figures(plot_kernel(modules[0], max_distance, title), stem)
        lines.append(f"![{run.method} kernel on {run.dataset.name}]({stem}.png)\n")
    return "\n".join(lines)


def _position_section(sweep, documents, figures) -> str:
    from tools.analysis.plot_position import plot_position_perplexity
    if not sweep.position_length:
        return ""
    L = sweep.position_length
    lines = ["## Figure 5: position-wise perplexity\n", f"_Scale: {sweep.scale}_\n",
             f"Perplexity at each position of the L = {L} chunks (mean over chunks, then seeds; trailing mean "
             "over 16 positions). The windowed run sees at most the training length of context; a method that "
             "uses more keeps falling below it past the training length.\n"]
    for dataset in sorted({d["run"]["dataset"] for d in documents}):
        chosen = [d for d in documents if d["run"]["dataset"] == dataset and
                  (d["run"]["pos_emb"] == sweep.windowed_baseline if d["run"]["attention_window"]
                   else d["run"]["method"] in sweep.position_methods)]
        if not chosen:
            continue
        stem = f"position_{dataset}"
        figures(plot_position_perplexity(chosen, L, dataset, smooth=16), stem)
        lines.append(f"![position-wise perplexity on {dataset}]({stem}.png)\n")
    return "\n".join(lines)


def _status_section(runs, documents, failures) -> str:
    finished = {(d["run"]["dataset"], d["run"]["method"], d["run"]["seed"]) for d in documents}
    missing = [str(r) for r in runs if (r.dataset.name, r.result_method(), r.seed) not in finished]
    lines = ["## Runs\n", f"{len(documents)} of {len(runs)} planned runs have results."]
    if missing:
        lines.append("Missing (not run yet, or failed): " + ", ".join(missing) + ".")
    for run, error in failures.items():
        lines.append(f"- **failed** {run}: {error.splitlines()[0]}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------ main
def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", help="sweep YAML, e.g. configs/reproduce/cpu-mini.yml")
    parser.add_argument("--datasets", nargs="+",
                        help="run these datasets of the sweep's `data` (default: its `datasets`)")
    parser.add_argument("--jobs", type=int, help="runs at a time (default: the sweep's `jobs`)")
    parser.add_argument("--dry-run", action="store_true", help="print the plan and the commands; run nothing")
    parser.add_argument("--report-only", action="store_true", help="write the report from the finished runs")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    # The command that produces this report from a clean checkout (a re-render runs no training).
    command = shlex.join(["python", "tools/reproduce.py", *(a for a in given if a != "--report-only")])
    sweep_path = pathlib.Path(args.sweep).resolve()
    os.chdir(REPO_ROOT)  # the sweep's paths are relative to the repository root
    sweep = load_sweep(sweep_path.relative_to(REPO_ROOT) if sweep_path.is_relative_to(REPO_ROOT) else sweep_path)
    names = args.datasets or sweep.datasets
    unknown = [n for n in names if n not in sweep.data]
    if unknown:
        raise SweepError(f"--datasets {unknown[0]!r} is not defined under `data` in {sweep.path} "
                         f"(defined: {', '.join(sweep.data)})")
    jobs = args.jobs or sweep.jobs

    if args.dry_run:
        for run in plan_runs(sweep, [sweep.data[n] for n in names]):
            for script, overrides in ([] if run.base else [("train.py", run.training_overrides())]) + \
                                     [("evaluate.py", run.evaluation_overrides())]:
                print(shlex.join(launch_command(script, sweep.profile, overrides)))
        return 0
    datasets = [sweep.data[n] for n in names] if args.report_only else prepare_data(sweep, names)
    if not datasets:
        raise SweepError(f"none of the datasets {names} is available; see the messages above")
    runs = plan_runs(sweep, datasets)
    for run in runs:
        run.args()  # every run's config is valid before anything is spent on the first one
    failures = {} if args.report_only else run_grid(runs, jobs, sweep.threads)
    # The report covers every dataset of the sweep with runs under work_dir, from this or earlier invocations.
    reported = [d for d in sweep.data.values() if d.ready() and (sweep.work_dir / d.name).is_dir()]
    try:
        report = write_report(sweep, plan_runs(sweep, reported), failures, command, args.report_only)
    except ResultFileError as err:
        raise SweepError(f"cannot write the report: {err}") from None
    print(f"wrote {report}" + (f"; {len(failures)} run(s) failed: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
