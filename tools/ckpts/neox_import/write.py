"""Write an imported model the way this project's own save does (megatron/checkpointing.py), so that
`evaluate.py` / `generate.py` load it unchanged with `--set load=OUT`."""
import os
import pathlib
import shutil

import torch

from megatron.checkpointing import model_config
from .layout import CheckpointImportError


def write_checkpoint(out_dir, neox_args, model, weights: dict, iteration: int, provenance: dict) -> pathlib.Path:
    """OUT/global_stepN/{mp_rank_00_model_states.pt, configs/*.yml} and OUT/latest; returns the step folder."""
    out_dir = pathlib.Path(out_dir)
    tag = f"global_step{iteration}"
    if (out_dir / tag).exists():
        raise CheckpointImportError(f"{out_dir / tag} exists already; import into a new directory (or remove it).")
    out_dir.mkdir(parents=True, exist_ok=True)
    partial = out_dir / f".{tag}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    (partial / "configs").mkdir(parents=True)
    state = {
        "module": weights,
        "iteration": iteration,
        "consumed_train_samples": 0,  # unknown: the fork keeps it in its optimizer-side state
        "model_config": model_config(neox_args, model),
        "neox_args": {k: v for k, v in neox_args.to_dict().items() if k != "config_files"},
        "imported_from": provenance,
    }
    torch.save(state, partial / "mp_rank_00_model_states.pt")
    for name, text in neox_args.config_files.items():
        (partial / "configs" / pathlib.Path(name).name).write_text(text)
    os.replace(partial, out_dir / tag)  # complete before `latest` names it, as in checkpointing._commit
    pointer = out_dir / "latest.tmp"
    pointer.write_text(tag)
    os.replace(pointer, out_dir / "latest")
    return out_dir / tag
