"""Weights & Biases, started one way for training's monitor (monitor.py) and evaluation's dashboards, from the
few keys of a run that say where its numbers go: a `WandbRun`, which the config package builds
(`NeoXArgs.wandb_run()`). No torch here: the config package imports this module."""
import os
from dataclasses import dataclass

from megatron.errors import NeoXArgsError


@dataclass(frozen=True)
class WandbRun:
    project: str | None                  # wandb-project
    group: str | None                    # wandb-group
    name: str | None                     # wandb-run-name
    team: str | None                     # wandb-team (W&B's entity)
    log_dir: str | None                  # log-dir: W&B's own files go there
    config: dict                         # the run's config, as the W&B run shows it


def start_wandb(run: WandbRun):
    """The started W&B run; a failure to start (not logged in, no network) is one paragraph that says what to do."""
    import wandb
    if run.log_dir:
        os.makedirs(run.log_dir, exist_ok=True)
    try:
        return wandb.init(project=run.project, group=run.group, name=run.name, entity=run.team, config=run.config,
                          dir=run.log_dir, reinit="finish_previous")
    except Exception as err:  # typically: not logged in, no network
        raise NeoXArgsError(f"use_wandb is set but Weights & Biases could not start: {err}. Log in "
                            "(`wandb login`), set WANDB_MODE=offline to log locally, or set use_wandb: false.") from err
