"""`python -m tools.reproduce SWEEP.yml [--datasets ...] [--jobs N] [--publish] [--dry-run | --report-only]`."""
import argparse
import dataclasses
import os
import pathlib
import shlex
import sys

if __package__ in (None, ""):  # `python tools/reproduce SWEEP.yml`: run as a folder, import as the package
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))
    __package__ = "tools.reproduce"

from megatron.neox_arguments import run_cli  # noqa: E402
from tools.reproduce import REPO_ROOT, __doc__ as DOC, inputs  # noqa: E402
from tools.reproduce.data import plan_data, prepare_data  # noqa: E402
from tools.reproduce.execute import SweepInterrupted, launch_command, run_grid  # noqa: E402
from tools.reproduce.plan import summary  # noqa: E402
from tools.reproduce.report import write_report  # noqa: E402
from tools.reproduce.runs import plan_runs  # noqa: E402
from tools.reproduce.spec import SweepError, load_sweep  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tools.reproduce", description=DOC.split("\n\n")[0])
    parser.add_argument("sweep", help="sweep YAML, e.g. configs/reproduce/cpu-mini.yml")
    parser.add_argument("--datasets", nargs="+",
                        help="run these datasets of the sweep's `data` (default: its `datasets`)")
    parser.add_argument("--jobs", type=int, help="runs at a time (default: the sweep's `jobs`)")
    parser.add_argument("--dry-run", action="store_true",
                        help="print the plan (corpora, runs done and to do, time estimate) and the commands; "
                        "run nothing")
    parser.add_argument("--publish", action="store_true",
                        help="write the report and its inputs into the sweep's `report_dir` (the published report, "
                        "often tracked files); without it they go to <work_dir>/report")
    parser.add_argument("--step-seconds", type=float, metavar="S",
                        help="--dry-run: seconds per training step to estimate with where no earlier run of the "
                        "sweep measured one")
    parser.add_argument("--report-only", action="store_true",
                        help="re-render the report from the inputs saved beside it; run nothing")
    args = parser.parse_args(argv)
    given = sys.argv[1:] if argv is None else list(argv)
    # The command that produces this report from a clean checkout (a re-render runs no training).
    command = shlex.join(["python", "-m", "tools.reproduce", *(a for a in given if a != "--report-only")])
    sweep_path = pathlib.Path(args.sweep).resolve()
    os.chdir(REPO_ROOT)  # the sweep's paths are relative to the repository root
    sweep = load_sweep(sweep_path.relative_to(REPO_ROOT) if sweep_path.is_relative_to(REPO_ROOT) else sweep_path)
    names = args.datasets or sweep.datasets
    unknown = [n for n in names if n not in sweep.data]
    if unknown:
        raise SweepError(f"--datasets {unknown[0]!r} is not defined under `data` in {sweep.path} "
                         f"(defined: {', '.join(sweep.data)})")

    published = sweep
    if not args.publish:  # a sweep writes into its own folder; the published report only when asked
        sweep = dataclasses.replace(sweep, report_dir=sweep.work_dir / "report")

    if args.dry_run:
        data_plans = plan_data(sweep, names)
        runs = plan_runs(sweep, list({p.runs_as.name: p.runs_as for p in data_plans if p.runs_as}.values()))
        print(summary(published, data_plans, runs, sweep.report_dir, args.publish, args.jobs or sweep.jobs,
                      args.step_seconds))
        print("# Commands")
        for run in runs:
            for script, overrides in ([] if run.base else [("train.py", run.training_overrides())]) + \
                                     [("evaluate.py", run.evaluation_overrides())]:
                print(shlex.join(launch_command(script, sweep.profile, overrides)))
        return 0
    if args.report_only:
        saved = inputs.load(sweep, None if args.publish else published.report_dir)
        # In the sweep's `data` order, as the run that wrote the report planned them (sections list runs in it).
        reported = [name for name in sweep.data if name in {d["run"]["dataset"] for d in saved.documents}]
        report = write_report(sweep, plan_runs(sweep, [sweep.data[n] for n in reported]), saved, {}, command,
                              rerendered=True)
        print(f"wrote {report}")
        return 0

    datasets = prepare_data(sweep, names)
    if not datasets:
        raise SweepError(f"none of the datasets {names} is available; see the messages above")
    runs = plan_runs(sweep, datasets)
    for run in runs:
        run.args()  # every run's config is valid before anything is spent on the first one
    try:
        failures = run_grid(runs, args.jobs or sweep.jobs, sweep.threads)
    except SweepInterrupted as stopped:  # the user's stop: no report from a half-run grid, the shell's status
        print(str(stopped), file=sys.stderr, flush=True)
        return 128 + stopped.signum
    # The report covers every dataset of the sweep with runs under work_dir, from this or earlier invocations.
    reported = plan_runs(sweep, [d for d in sweep.data.values() if d.ready() and (sweep.work_dir / d.name).is_dir()])
    collected = inputs.collect(reported)
    if collected.documents:
        inputs.save(collected, sweep)
    report = write_report(sweep, reported, collected, failures, command)
    print(f"wrote {report}" + (f"; {len(failures)} run(s) failed: {', '.join(failures)}" if failures else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(run_cli(main))
