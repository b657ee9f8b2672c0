"""The report's inputs, kept beside it so `--report-only` re-renders it from a fresh clone.

    <report_dir>/inputs/results/*.json   the result files of the finished runs (evaluate.py's own files)
    <report_dir>/inputs/lm_eval/*.json   their RULER results (eval.py's files), when the sweep has `ruler`
    <report_dir>/inputs/scalars.json     {run: {tag: [[step, value], ...]}}: the TensorBoard scalars the
                                         training curves and Table 4 read
    <report_dir>/inputs/facts.json       what else the report prints from the machine that ran the sweep:
                                         token counts of the corpora, the commits the runs trained at

Small files only: no checkpoints. Kernel figures need checkpoints, so a re-render without them keeps
the kernel figures already beside the report.
"""
import dataclasses
import json
import pathlib
import shutil

from megatron.evaluation.results import ResultFileError, load_result, load_results, write_atomic
from tools.analysis.ruler_table import load_ruler
from tools.analysis.training_speed import STEP_TIME_TAG, scalar_points
from .runs import Run, RunFailed, check_training_config, finished_result, finished_ruler, trained_step
from .spec import Dataset, Sweep, SweepError

VALID_LOSS, TOKENS_PER_SEC = "valid/loss", "train/tokens_per_sec"
TAGS = (VALID_LOSS, STEP_TIME_TAG, TOKENS_PER_SEC)


@dataclasses.dataclass
class ReportInputs:
    documents: list          # result files (megatron/evaluation/results.py), each with its "path"
    scalars: dict            # str(run) -> {tag: [(step, value), ...]}
    dataset_tokens: dict     # dataset name -> tokens in its .bin
    trained_commits: list    # commits the reported runs were trained at
    ruler_documents: list = dataclasses.field(default_factory=list)  # eval.py's RULER files, each with "path"

    def curve(self, run: Run, tag: str) -> list:
        return [tuple(point) for point in self.scalars.get(str(run), {}).get(tag, [])]


def folder(sweep: Sweep) -> pathlib.Path:
    return sweep.report_dir / "inputs"


def collect(runs: list[Run]) -> ReportInputs:
    """The inputs as the finished runs under work_dir have them now."""
    documents, ruler_documents = [], []
    for run in runs:
        try:
            check_training_config(run)
        except RunFailed:
            continue  # checkpoints of another config: their results are not this sweep's
        path = finished_result(run, run.args().train_iters)
        if path:
            documents.append(labelled(load_result(path), run))
        ruler_path = path and run.sweep.ruler and finished_ruler(run, run.args().train_iters)
        if ruler_path:
            ruler_documents.append(labelled({**json.loads(ruler_path.read_text()), "path": str(ruler_path)}, run))
    trained = [r for r in runs if not r.base and trained_step(r) == r.args().train_iters]
    scalars = {str(r): {tag: scalar_points(r.directory / "tensorboard", tag) for tag in TAGS} for r in trained}
    stamps = [r.directory / "training_config.json" for r in trained]
    commits = sorted({json.loads(s.read_text()).get("commit", "?")[:10] for s in stamps if s.is_file()})
    datasets = {r.dataset.name: r.dataset for r in runs}
    return ReportInputs(documents, scalars, {n: _tokens(d) for n, d in datasets.items()}, commits, ruler_documents)


def labelled(document: dict, run: Run) -> dict:
    """The result file as the report reads it: a training variant's or an extension's run carries its label
    (evaluate.py writes the pos-emb's, knowing nothing of the sweep) and the keys it was trained with; an
    extension also the label of the run it extends (its base model)."""
    if run.named:
        old = document["run"]["name"]
        if run.trained:
            extra = {"training_variant": {"label": run.trained, "keys": run.sweep.training_variants[run.method][run.trained]}}
        else:
            extra = {"extension": {"label": run.extension, "keys": run.sweep.extensions[run.method][run.extension],
                                   "base": str(run.extends.label)}}
        document["run"] = {**document["run"], "method": str(run.label), "variant": run.label.variant, **extra,
                           "name": old.replace(f"_{run.written_label}_", f"_{run.label}_", 1)}
    return document


def relabelled(document: dict) -> bool:
    """Whether `labelled` rewrote the file's run (a training variant's or an extension's)."""
    return bool(document["run"].get("training_variant") or document["run"].get("extension"))


def save(inputs: ReportInputs, sweep: Sweep) -> None:
    """Replace the inputs beside the report with these."""
    out = folder(sweep)
    shutil.rmtree(out / "results", ignore_errors=True)
    (out / "results").mkdir(parents=True)
    for document in inputs.documents:
        if relabelled(document):  # (`labelled`): written, not copied
            write_atomic(out / "results" / f"{document['run']['name']}.json",
                         {k: v for k, v in document.items() if k != "path"})
        else:
            shutil.copyfile(document["path"], out / "results" / pathlib.Path(document["path"]).name)
    shutil.rmtree(out / "lm_eval", ignore_errors=True)
    if inputs.ruler_documents:
        (out / "lm_eval").mkdir()
    for document in inputs.ruler_documents:  # written (not copied): a training variant's is relabelled
        write_atomic(out / "lm_eval" / f"{document['run']['name']}.json",
                     {k: v for k, v in document.items() if k != "path"})
    write_atomic(out / "scalars.json", inputs.scalars)
    write_atomic(out / "facts.json", {"dataset_tokens": inputs.dataset_tokens,
                                      "trained_commits": inputs.trained_commits})


def load(sweep: Sweep, published=None) -> ReportInputs:
    """The inputs saved beside the report (what `--report-only` renders from). `published`: the sweep's
    published report folder, named in the error when this one (the sweep's own) has none."""
    out = folder(sweep)
    if not (out / "facts.json").is_file():
        also = (f", or add --publish to re-render the published report in {published} from the inputs beside it"
                if published and (pathlib.Path(published) / "inputs" / "facts.json").is_file() else "")
        raise SweepError(f"{out} holds no report inputs (facts.json, scalars.json, results/); run the sweep "
                         f"without --report-only once (finished runs are skipped) to collect them there{also}")
    try:
        documents = load_results(out / "results")
        scalars = json.loads((out / "scalars.json").read_text())
        facts = json.loads((out / "facts.json").read_text())
        ruler_documents = load_ruler(out)
    except (OSError, json.JSONDecodeError, ResultFileError) as err:
        raise SweepError(f"the report inputs in {out} cannot be read: {err}") from None
    return ReportInputs(documents, scalars, facts["dataset_tokens"], facts["trained_commits"], ruler_documents)


def _tokens(dataset: Dataset) -> int:
    if not dataset.ready():
        return 0
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    index = IndexedDataset(dataset.prefix)  # keep it alive: its lengths are a view of its memory map
    return int(index.sequence_lengths.sum())
