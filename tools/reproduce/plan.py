"""What `--dry-run` prints before the commands: the corpora (present, prepared by which command, or missing
and how they are obtained), the trainings and evaluations to do and already done, where the report goes,
and an estimate of the time with the costs it was computed from."""
import dataclasses
import datetime
import pathlib

import numpy as np

from tools.analysis.training_speed import STEP_TIME_TAG, typical_step_seconds
from . import inputs as report_inputs
from .inputs import TOKENS_PER_SEC
from .runs import RunFailed, check_training_config, finished_result, finished_ruler, trained_step
from .spec import Sweep, SweepError

# Start-up of one `deepy.py train.py` or `deepy.py evaluate.py` launch (launcher, rank, imports, data index,
# the final validation): 19-26 s measured on the project's 2-core machine at load ~6 with
# `time python deepy.py train.py configs/tiny.yml --set train-iters=1 --set save=... --set load=...` and
# `time python deepy.py evaluate.py configs/tiny.yml --set 'eval-lengths=[64]' --set eval-chunks=1 ...`.
LAUNCH_SECONDS = 20


@dataclasses.dataclass
class Costs:
    """Measured costs: seconds per training step and per evaluation, by method label, and where from."""
    step: dict
    evaluation: dict
    source: str


def summary(sweep: Sweep, data_plans, runs, report_dir: pathlib.Path, published: bool, jobs: int,
            step_seconds: float | None) -> str:
    lines = [f"# Plan of sweep `{sweep.name}` ({sweep.path}): {sweep.scale}", "Corpora:"]
    lines += [f"  {plan.line}" for plan in data_plans]
    trainings, evaluations = [r for r in runs if not r.base], runs
    iters = {id(r): r.args().train_iters for r in runs}
    steps_done, broken = {}, set()
    for run in trainings:
        try:
            check_training_config(run)
        except RunFailed:
            broken.add(id(run))
        steps_done[id(run)] = trained_step(run) or 0
    usable = [r for r in trainings if id(r) not in broken]
    trained = {id(r) for r in usable if steps_done[id(r)] == iters[id(r)]}
    resuming = [r for r in usable if 0 < steps_done[id(r)] < iters[id(r)]]
    evaluated = {id(r) for r in evaluations if id(r.owner) in trained and finished_result(r, iters[id(r)])
                 and (not sweep.ruler or finished_ruler(r, iters[id(r)]))}  # RULER: evaluated by eval.py too
    to_train = [r for r in usable if id(r) not in trained]
    to_evaluate = [r for r in evaluations if id(r.owner) not in broken and id(r) not in evaluated]
    lines.append(f"Trainings: {len(trainings)}: {len(trained)} done, {len(to_train)} to do"
                 + (f" ({len(resuming)} of them resume from their last checkpoint)" if resuming else "")
                 + (f"; {sum(1 for r in trainings if r.extends)} of them extensions, each trained after the run it "
                    "extends (finetune from its final checkpoint)" if sweep.extensions else ""))
    lines.append(f"Evaluations: {len(evaluations)}: {len(evaluated)} done, {len(to_evaluate)} to do")
    if sweep.ruler:
        lines.append(f"RULER: {', '.join(sweep.ruler['tasks'])} by eval.py after each evaluation, "
                     f"{sweep.ruler['limit']} samples per length at {sweep.evaluation.get('eval_lengths')} (an "
                     "evaluation is done when both are)")
    if broken:
        names = ", ".join(str(r) for r in trainings if id(r) in broken)
        lines.append(f"Blocked: {names}: their folders hold checkpoints of a different "
                     "training config (the sweep or profile changed since); delete those run folders to retrain "
                     "them, or give the sweep another work_dir")
    lines.append(f"Writes: runs under {sweep.work_dir}/, the report in {report_dir}/"
                 + ("" if published or report_dir == sweep.report_dir else
                    f" (the published report in {sweep.report_dir}/ is rewritten only with --publish)"))
    lines.append(_estimate(sweep, to_train, to_evaluate, steps_done, iters, jobs, step_seconds, report_dir))
    return "\n".join(lines)


def _estimate(sweep, to_train, to_evaluate, steps_done, iters, jobs, step_seconds, report_dir) -> str:
    if not to_train and not to_evaluate:
        return "Time: nothing to run; the report is re-rendered from the finished runs"
    costs = measured_costs(sweep, report_dir, to_train + to_evaluate)
    steps = [(r, iters[id(r)] - steps_done[id(r)]) for r in to_train]
    unmeasured = sorted({str(r.label) for r in to_train if str(r.label) not in costs.step})
    if unmeasured and step_seconds is None:
        why = f"{costs.source} has no step time of {', '.join(unmeasured)}" if costs.step else costs.source
        return (f"Time: no estimate: {why}; state a per-step cost with --step-seconds S (seconds per training "
                f"step) to estimate {sum(n for _, n in steps):,} steps")
    training = sum(n * costs.step.get(str(r.label), step_seconds or 0) for r, n in steps)
    evaluation = sum(costs.evaluation.get(str(r.label), 0.0) for r in to_evaluate)
    no_eval = sorted({str(r.label) for r in to_evaluate if str(r.label) not in costs.evaluation})
    launches = len(to_train) + len(to_evaluate)
    jobs = max(1, min(jobs, len({id(r.owner) for r in to_train + to_evaluate})))  # one worker per base run
    total = (training + evaluation + launches * LAUNCH_SECONDS) / jobs
    per_method = ", ".join(f"{label} {seconds:.3f}" for label, seconds in sorted(costs.step.items()))
    how = [f"{sum(n for _, n in steps):,} training steps at "
           + (f"the median step time of each method measured by earlier runs of this sweep ({costs.source}: "
              f"{per_method} s/step, as many runs at a time as that sweep ran, on its machine)"
              if costs.step else "")
           + (" and " if costs.step and unmeasured else "")
           + (f"{step_seconds:g} s/step as stated (--step-seconds) for {', '.join(unmeasured) or 'every run'}"
              if step_seconds is not None and (unmeasured or not costs.step) else ""),
           f"{len(to_evaluate)} evaluations at the seconds their result files record for the same runs"
           + (f" (none measured for {', '.join(no_eval)}: counted as 0 s)" if no_eval else ""),
           f"{launches} launches x {LAUNCH_SECONDS} s start-up (measured by hand, tools/reproduce/plan.py)",
           f"divided by {jobs} run(s) at a time"]
    return f"Time: about {_duration(total)}: " + "; ".join(how)


def measured_costs(sweep: Sweep, report_dir: pathlib.Path, runs) -> Costs:
    """The costs recorded in the report inputs of an earlier run of this sweep: this invocation's report
    folder first, else the published one (sweep.report_dir)."""
    for folder in dict.fromkeys([report_dir, sweep.report_dir]):
        try:
            saved = report_inputs.load(dataclasses.replace(sweep, report_dir=folder))
        except SweepError:
            continue
        tokens_per_step = {str(r.label): r.args().train_batch_size * r.args().seq_length for r in runs}
        step = {}
        for key, tags in saved.scalars.items():
            label = key.split("/")[1]
            times, rates = tags.get(STEP_TIME_TAG) or [], tags.get(TOKENS_PER_SEC) or []
            if len(times) >= 2:
                step.setdefault(label, []).append(typical_step_seconds(times))
            elif len(rates) >= 2 and label in tokens_per_step:
                step.setdefault(label, []).append(tokens_per_step[label] / typical_step_seconds(rates))
        evaluation = {}
        for document in saved.documents:
            seconds = [r["seconds"] for r in document["results"] if "seconds" in r]
            if seconds:
                evaluation.setdefault(document["run"]["method"], []).append(sum(seconds))
        source = report_inputs.folder(dataclasses.replace(sweep, report_dir=folder))
        return Costs({k: float(np.median(v)) for k, v in step.items()},
                     {k: float(np.median(v)) for k, v in evaluation.items()}, str(source))
    return Costs({}, {}, f"no earlier run of this sweep left report inputs ({report_dir}/inputs, "
                         f"{sweep.report_dir}/inputs)")


def _duration(seconds: float) -> str:
    minutes = round(seconds / 60)
    return f"{minutes // 60} h {minutes % 60:02d} min" if minutes >= 60 else \
        f"{max(minutes, 1)} min" if seconds >= 30 else str(datetime.timedelta(seconds=int(seconds)))
