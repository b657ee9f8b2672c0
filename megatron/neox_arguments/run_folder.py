"""One folder per run: `run-dir` files what a run writes under it (torchtitan's `job.dump_folder`), and an
evaluation writes its results beside the checkpoint it scores.

With `run-dir: R`, each of these keys the config leaves out is R's subfolder: save and load R/checkpoints
(so the same command resumes), tensorboard-dir R/tensorboard, log-dir R/logs, eval-results-dir
R/eval_results. A key the config sets (null included) wins. Without run-dir and eval-results-dir, a process
that loads a checkpoint writes its results into `eval_results` in the folder of the checkpoint's run: the
folder above `load` when `load` is a run folder's `checkpoints`, else `load` itself -- never a folder another
run shares (a `load` from a checkpoint's stored config: the default instead).

Filled in before the checkpoint is read (`load` may come from run-dir), each with its source
("run-dir (configs/x.yml:3)"), so --dry-run and every error name where a folder came from."""
import pathlib

from .from_checkpoint import is_stored_config
from .yaml_loader import normalise_key

SUBFOLDERS = {"save": "checkpoints", "load": "checkpoints", "tensorboard_dir": "tensorboard", "log_dir": "logs",
              "eval_results_dir": "eval_results"}
CHECKPOINTS = SUBFOLDERS["save"]
RESULTS = SUBFOLDERS["eval_results_dir"]


def _given(values: dict) -> dict:
    return {normalise_key(k): k for k in values}


def run_folder_source(values: dict, sources: dict) -> tuple[dict, dict]:
    """(values, sources) with the keys run-dir files that `values` leaves out."""
    spelling = _given(values)
    run_dir = values.get(spelling.get("run_dir"))
    if run_dir in (None, ""):
        return values, sources
    values, sources = dict(values), dict(sources)
    origin = f"run-dir ({sources.get('run_dir', 'the given config')})"
    for key, sub in SUBFOLDERS.items():
        if key not in spelling:
            values[key] = str(pathlib.Path(run_dir) / sub)
            sources[key] = origin
    return values, sources


def checkpoint_run_folder(load) -> pathlib.Path:
    """The folder of the run whose checkpoints `load` holds."""
    load = pathlib.Path(load)
    return load.parent if load.name == CHECKPOINTS else load


def results_beside_checkpoint(values: dict, sources: dict) -> tuple[dict, dict]:
    """(values, sources) with eval-results-dir in the loaded checkpoint's run folder, where neither the config
    nor run-dir (nor, for a checkpoint evaluated alone, its own run's config) names one."""
    spelling = _given(values)
    load = values.get(spelling.get("load"))
    if "eval_results_dir" in spelling or load in (None, ""):
        return values, sources
    if is_stored_config(sources.get("load", "").rsplit(":", 1)[0]):
        return values, sources  # a checkpoint's stored config never decides where this process writes
    values, sources = dict(values), dict(sources)
    values["eval_results_dir"] = str(checkpoint_run_folder(load) / RESULTS)
    sources["eval_results_dir"] = f"beside the checkpoint load names ({sources.get('load', 'the given config')})"
    return values, sources


OUTPUT_KEYS = ("save", "load", "tensorboard_dir", "log_dir", "eval_results_dir")


def describe_outputs(neox_args) -> str:
    """--dry-run's lines: where this run reads checkpoints and writes, each with the source of the folder."""
    rows = []
    for key in OUTPUT_KEYS:
        value = getattr(neox_args, key)
        source = neox_args.config_sources.get(key, "default")
        rows.append((key.replace("_", "-"), "(none)" if value in (None, "") else str(value), source))
    width = max(len(r[0]) for r in rows)
    vwidth = max(len(r[1]) for r in rows)
    return "\n".join(f"{k:<{width}}  {v:<{vwidth}}  # {s}" for k, v, s in rows)
