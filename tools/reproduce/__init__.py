"""Reproduce the KERPLE paper's experiment end to end from one sweep YAML, and write the report.

    python -m tools.reproduce configs/reproduce/cpu-mini.yml                  # the CPU grid (make reproduce)
    python -m tools.reproduce configs/reproduce/cpu-mini.yml --datasets stdlib prose
    python -m tools.reproduce configs/reproduce/paper.yml                     # 162M / 512 / 50k, GPUs
    python -m tools.reproduce SWEEP.yml --dry-run                            # the plan, then every command
    python -m tools.reproduce SWEEP.yml --publish [--report-only]            # into the published report_dir

For every (dataset, method, seed) of the grid it prepares the data, trains through
`deepy.py train.py`, evaluates at every length through `deepy.py evaluate.py` (the commands a GPU user
runs by hand), evaluates the windowed baseline, fine-tunes each `extensions` entry from its base run's
final checkpoint once that run finished, and then writes the report (Tables 3-5, Figures 2-5,
perplexity versus length) with tools/analysis. It is resumable: a run with a checkpoint at its final
step and a complete result file is skipped, an interrupted training resumes from its last checkpoint,
and a failed run is reported while the others go on. Paths in the sweep YAML are relative to the
repository root; everything a sweep writes goes under its `work_dir`, the report included
(<work_dir>/report/, with its inputs: result files and training scalars). The sweep's `report_dir` is the
published report (docs/reproduction/ for cpu-mini: tracked files), written only with --publish, and its
inputs beside it let `--report-only --publish` re-render it from a fresh clone. `--dry-run` prints the plan
first (plan.py): corpora present or missing and what prepares them, runs done and to do, a time estimate.

spec.py reads the sweep, runs.py plans the runs and knows what is finished, execute.py runs them,
data.py plans and prepares the corpora, plan.py prints the plan, inputs.py and report.py (with sections.py)
write the report. verdicts.py is the one verdict engine (which of two methods is significantly better at a
length, what a long length is, and the verdict words) under claims.py (the paper's claims, with the methods
the study file's `claims:` names), ablation.py (the ablation's rules, for the method and anchor its `ablation:`
names; other papers' numbers of a method are data in theirs.py) and variants.py (variants beside their
parents, extensions beside their base models); figures.py draws their measure-against-length figures.
"""
import pathlib

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
