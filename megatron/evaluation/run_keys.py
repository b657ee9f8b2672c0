"""What evaluate.py's driver and eval.py's lm-eval run take from a run's config, as typed records the config
package builds (megatron/neox_arguments/to_evaluation.py: `NeoXArgs.evaluation_run()`, `NeoXArgs.lm_eval_tasks()`):
below the entry points, evaluation reads these, never the run config itself. No torch here: the config package
imports this module."""
from dataclasses import dataclass
from typing import TYPE_CHECKING

from megatron.checkpoint.run_keys import InferenceRun
from megatron.run.run_keys import PreflightRun
from megatron.run.wandb_run import WandbRun

from .settings import EvaluationSettings

if TYPE_CHECKING:
    from megatron.data.run_keys import DataRun  # megatron.data imports megatron-core: the config package does not


@dataclass(frozen=True)
class EvaluatedRun:
    """What the evaluating config says of the run, for the result file's `run` (run.py's run_record); what the
    run was trained with comes from the checkpoint's own config."""
    dataset: str                         # the evaluated data: its file stems without `_text_document`
    pos_emb: str                         # pos-emb
    attention_window: int | None         # attention-window, a per-run choice
    per_run_options: dict                # {key: value} of the method's per-run options set here (rotary-scaling, ...)
    run_name: str | None                 # run-name, as this config gives it
    run_name_from: str                   # where that config set it ('the config' where it did not)
    trained_keys: dict                   # {key: default}: the keys that decide what is trained (the config hash)
    num_layers: int
    hidden_size: int
    num_attention_heads: int


@dataclass(frozen=True)
class Dashboards:
    """Where evaluation's numbers are charted beside the result file (dashboards.py)."""
    tensorboard_dir: str | None          # tensorboard-dir (None: no TensorBoard)
    wandb: WandbRun | None               # None: use-wandb is off


@dataclass(frozen=True)
class RunStart:
    """What the start of an evaluation reads besides its settings, before the checkpoint is opened: the ranks'
    seed, the start-up checks' keys and the evaluated data's."""
    seed: int                            # the run's seed: every rank's generators, once the ranks have joined
    preflight: PreflightRun              # the start-up checks (megatron/run/preflight.py): results folder, memory
    data: "DataRun"                      # where the eval-split's documents are (megatron/data)
    model_only_from: str | None          # the checkpoint folder that alone gave the model, data-path unset: its
                                         # run's data is not known (None: the config gave the data, or its run)


@dataclass(frozen=True)
class EvaluationRun:
    """Everything one evaluation of a trained run takes: what evaluate_run (driver.py) and eval.py's run read."""
    settings: EvaluationSettings         # the evaluation keys (settings.py)
    evaluated: EvaluatedRun              # for the result file's `run`
    inference: InferenceRun              # the model, its tokenizer and the keys that load it (megatron/checkpoint)
    start: RunStart                      # the ranks, the start-up checks and the data
    dashboards: Dashboards


@dataclass(frozen=True)
class LmEvalTasks:
    """The lm-eval keys of eval.py's run (lm_eval_run.py, ruler.py)."""
    tasks: tuple[str, ...]               # eval-tasks
    task_paths: tuple[str, ...]          # eval-task-paths: folders of task YAML files
    task_metadata: dict | None           # eval-task-metadata, for every task
    task_length: int | None              # eval-task-length (None: RULER's longest length, else seq-length)
    task_limit: int | float | None       # eval-task-limit
    num_fewshot: int | None              # eval-task-num-fewshot
    seq_length: int                      # the run's training length
    eval_lengths: tuple[int, ...] | None  # eval-lengths as the config gives them (None: unset)
    sources: dict                        # {key: 'FILE:LINE'} of eval_results_dir, eval_lengths, eval_task_metadata where set
