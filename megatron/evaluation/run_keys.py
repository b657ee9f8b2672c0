"""What evaluate.py's driver and eval.py's lm-eval run take from a run's config, as typed records the config
package builds (megatron/neox_arguments/to_evaluation.py: `NeoXArgs.evaluation_run()`, `NeoXArgs.lm_eval_tasks()`):
below the entry points, evaluation reads these, never the run config itself. No torch here: the config package
imports this module."""
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from megatron.checkpoint.run_keys import InferenceRun
from megatron.run.wandb_run import WandbRun

from .settings import EvaluationSettings

if TYPE_CHECKING:
    import numpy as np

    from megatron.tokenizer import Tokenizer


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
    """The steps of an evaluation's start that still read the run's config itself (start-up of the ranks, the
    tokenizer, the start-up checks, the data), bound to it by the config package, so that the evaluation package
    calls them in its own order without holding the config."""
    begin: Callable[[Callable], None]                 # this rank's start: the process group (several ranks), the launcher's watch; takes `say`
    tokenizer: Callable[[], "Tokenizer"]              # the run's tokenizer
    check: Callable[[int], None]                      # the start-up checks (megatron/run/preflight.py) at this padded vocabulary
    stream: Callable[["Tokenizer"], "np.ndarray"]     # the eval-split's tokens (megatron/data)
    memory_problem: Callable[[list, int], "str | None"]  # what cannot fit one forward at the longest of these lengths, at this vocabulary


@dataclass(frozen=True)
class EvaluationRun:
    """Everything one evaluation of a trained run takes: what evaluate_run (driver.py) and eval.py's run read."""
    settings: EvaluationSettings         # the evaluation keys (settings.py)
    evaluated: EvaluatedRun              # for the result file's `run`
    inference: InferenceRun              # the model and the keys that load it (megatron/checkpoint/run_keys.py)
    dashboards: Dashboards
    start: RunStart


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
