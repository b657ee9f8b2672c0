"""Table 4: seconds per training step, read from training runs' TensorBoard logs (the scalar
`train/seconds_per_step` that the training monitor writes every log interval).

Each `--train-logs` item is `METHOD=FOLDER` or a FOLDER named after the method; runs given the same
method (seeds) are averaged. A run's sec/step is the median of the logged step times, leaving out the
first logged point (start-up: data index building, first-call compilation).
"""
import pathlib
from collections import defaultdict

import numpy as np

from megatron.evaluation.identity import Method
from megatron.evaluation.results import ResultFileError
from .paper_numbers import TABLE4
from .results_index import method_sort_key
from .table_text import md_row, tex_text

STEP_TIME_TAG = "train/seconds_per_step"


def scalar_points(folder, tag: str) -> list:
    """[(step, value)] of one TensorBoard scalar over every event file under `folder`, by step (a
    resumed run's later file wins at a repeated step)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    points = {}
    for event_dir in sorted({p.parent for p in pathlib.Path(folder).rglob("events.out.tfevents.*")}):
        events = EventAccumulator(str(event_dir), size_guidance={"scalars": 0}).Reload()
        if tag in events.Tags()["scalars"]:
            points.update({e.step: e.value for e in events.Scalars(tag)})
    return sorted(points.items())


def typical_step_seconds(points) -> float:
    """The rule for a run's sec/step: the median of the logged points after the first (start-up)."""
    return float(np.median([value for _, value in sorted(points)[1:]]))


def run_seconds_per_step(folder) -> float:
    times = scalar_points(folder, STEP_TIME_TAG)
    if len(times) < 2:
        event_dirs = {p.parent for p in pathlib.Path(folder).rglob("events.out.tfevents.*")}
        raise ResultFileError(
            f"{folder}: found {len(times)} '{STEP_TIME_TAG}' points in TensorBoard event files "
            f"({len(event_dirs)} event folders); pass the tensorboard-dir of a training run that logged "
            "at least two log intervals")
    return typical_step_seconds(times)


def speed_table(items) -> dict:
    """{method: [sec/step of each run]} from `METHOD=FOLDER` or `FOLDER` items."""
    speeds = defaultdict(list)
    for item in items:
        method, _, folder = item.rpartition("=")
        speeds[Method(method or pathlib.Path(folder).name)].append(run_seconds_per_step(folder))
    return dict(speeds)


def render_table4(speeds: dict, fmt: str = "md", with_paper: bool = False) -> str:
    header = ["method", "sec/step (this run)", "runs"] + (["paper sec/step (A100, GitHub)"] if with_paper else [])
    rows = []
    for method in sorted(speeds, key=method_sort_key):
        values = np.array(speeds[method])
        std = f" ± {values.std(ddof=1):.4f}" if len(values) > 1 else ""
        paper = [f"{TABLE4[method]:.3f}" if method in TABLE4 else ""] if with_paper else []
        rows.append([method, f"{values.mean():.4f}{std}", str(len(values))] + paper)
    if fmt == "csv":
        return "\n".join(",".join(r) for r in [header, *rows]) + "\n"
    if fmt == "tex":
        body = [" & ".join(map(tex_text, r)).replace("_", r"\_").replace("±", r"$\pm$") + r" \\" for r in rows]
        return "\n".join([r"\begin{tabular}{l" + "r" * (len(header) - 1) + "}", r"\toprule",
                          " & ".join(header) + r" \\", r"\midrule", *body, r"\bottomrule", r"\end{tabular}"]) + "\n"
    lines = [md_row(header), "|" + "---|" * len(header)]
    lines += [md_row(r) for r in rows]
    note = "\n\nPaper column: the KERPLE paper's Table 4 (one A100), not this machine.\n" if with_paper else "\n"
    return "\n".join(lines) + note
