"""Write an imported model the way this project's own save does (megatron/checkpoint/checkpointing.py: model_config,
resolved_config.yml), so that `evaluate.py` / `generate.py` load it with only `--set load=OUT`."""
import os
import pathlib
import shutil

import torch

from megatron.checkpoint.folder import RESOLVED_NAME, checkpoint_steps
from megatron.output_paths import new_folder_problem
from .layout import CheckpointImportError


def output_problem(out_dir) -> str | None:
    """Why OUT cannot take the imported checkpoint, or None. OUT must be a new or empty folder: a folder
    that holds anything else may be another run's `save` folder, whose `latest` the import would
    re-point at the imported step (and whose next save or resume would then start from it). Nothing is
    created here: the nearest existing folder above OUT is tested with a file created and removed."""
    out_dir = pathlib.Path(out_dir)
    if out_dir.is_dir() and any(out_dir.iterdir()):
        steps, latest = checkpoint_steps(out_dir), out_dir / "latest"
        if steps or latest.is_file():
            named = latest.read_text(errors="replace").strip()[:100] if latest.is_file() else None
            holds = f"holds a run's checkpoints (steps {steps}, `latest` names {named!r})"
        else:
            entries = sorted(p.name for p in out_dir.iterdir())
            more = f" and {len(entries) - 8} more" if len(entries) > 8 else ""
            holds = f"is not empty (it holds {entries[:8]}{more})"
        return (f"OUT {out_dir} {holds}. The import writes its own `latest` there, which would make that "
                "folder's runs resume and evaluate from the imported step, so it only writes into a new or "
                f"empty folder: give another OUT (e.g. {out_dir.name}-imported), or move {out_dir} away first "
                "if nothing in it is wanted.")
    problem = new_folder_problem(out_dir)
    return f"OUT {problem}" if problem else None


def write_checkpoint(out_dir, neox_args, model, weights: dict, iteration: int, provenance: dict) -> pathlib.Path:
    """OUT/global_stepN/{mp_rank_00_model_states.pt, configs/*.yml} and OUT/latest; returns the step folder."""
    out_dir = pathlib.Path(out_dir)
    tag = f"global_step{iteration}"
    problem = output_problem(out_dir)  # again: checked before converting, but something may have appeared since
    if problem:
        raise CheckpointImportError(problem)
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f".{tag}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "configs").mkdir(parents=True)
    state = {
        "module": weights,
        "iteration": iteration,
        "consumed_train_samples": 0,  # unknown: the fork keeps it in its optimizer-side state
        "model_config": model.config.record(),
        "neox_args": {k: v for k, v in neox_args.to_dict().items() if k != "config_files"},
        "imported_from": provenance,
    }
    torch.save(state, partial / "mp_rank_00_model_states.pt")
    for name, text in neox_args.config_files.items():
        (partial / "configs" / pathlib.Path(name).name).write_text(text)
    (partial / RESOLVED_NAME).write_text(neox_args.resolved_yaml())  # as train.py's: the checkpoint alone loads
    os.replace(partial, out_dir / tag)  # complete before `latest` names it, as in checkpointing._commit
    pointer = out_dir / "latest.tmp"
    pointer.write_text(tag)
    os.replace(pointer, out_dir / "latest")
    return out_dir / tag
