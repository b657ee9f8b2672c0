"""The keys of a run's config that training reads, as typed records the config package builds
(megatron/neox_arguments/to_training.py: `NeoXArgs.training_run()`), grouped as a reader looks for them: the
optimizer, its learning-rate schedule, one step, the loop around the steps, the banner. Below train.py, training
takes these, the `ModelConfig` and the records of the rooms it calls (data, checkpoints, start-up checks, the
monitor), never the run config itself. No torch here: the config package imports this module."""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from megatron.checkpoint.run_keys import CheckpointRun
from megatron.model.model_config import ModelConfig
from megatron.run.run_keys import MonitorRun, PreflightRun
from megatron.tokenizer.run_keys import TokenizerRun

if TYPE_CHECKING:  # megatron.data imports megatron-core: the config package builds a DataRun only when asked
    from megatron.data.run_keys import DataRun


@dataclass(frozen=True)
class OptimizerRun:
    """Adam/AdamW's settings (optimizer.py's build_optimizer)."""
    params: dict                      # optimizer.params as given (betas, eps, ...): lr and weight-decay are below
    lr: float                         # the peak learning rate (optimizer.params.lr)
    weight_decay: float               # on every parameter but norms, biases and kernel parameters


@dataclass(frozen=True)
class LrSchedule:
    """NeoX's learning-rate schedule (optimizer.py's build_lr_scheduler) towards `min_lr` from the optimizer's lr."""
    decay_style: str                  # lr-decay-style: constant | linear | cosine | exponential
    decay_iters: int                  # lr-decay-iters: the steps the decay spans
    warmup: float                     # the share of decay_iters spent warming up from 0
    min_lr: float


@dataclass(frozen=True)
class StepRun:
    """What one training step (loop.py's train_step) reads besides the engine and its batches; the periodic
    evaluation and the weights' check read its positions and masking too."""
    gradient_accumulation_steps: int  # micro-batches per step
    gradient_clipping: float          # the global gradient norm's cap (0: none) where the step clips itself
    sequence_parallel_size: int       # ranks that hold one sequence's shards (their losses add up)
    random_positions: int | None      # positions drawn from [0, N) for every micro-batch (None: 0..L-1)
    pose_target_length: int | None    # PoSE: chunk-wise skipped positions up to this length
    pose_chunks: int                  # PoSE's chunks
    reset_attention_mask: bool        # packed documents masked from each other
    reset_position_ids: bool          # ... and their positions restarting in each document
    eod_mask_loss: bool               # named in the message of a batch the loss mask empties


@dataclass(frozen=True)
class LoopRun:
    """When the loop reports, saves, stops and gives up (loop.py's train)."""
    log_interval: int                 # a report line every N steps
    checkpoint_factor: int | None     # a save every N steps (with save set)
    extra_save_iters: tuple           # saves at these steps too (0: the initial weights)
    exit_interval: int | None         # stop (as a preempted run does) after every N steps
    max_consecutive_bad_steps: int    # NaN/inf or fp16-overflow steps in a row that stop the run


@dataclass(frozen=True)
class RunBanner:
    """What train.py says about a run before its first step (banner.py)."""
    run_name: str | None
    run_dir: str | None
    save: str | None
    pos_emb: str
    trained: dict                     # {key: value} of the keys that decide what is trained (NeoXArgs.trained_keys),
                                      # whose switches beyond the method the model line names
    attention_window: int | None
    precision: str
    world_size: int
    seq_length: int
    reset_attention_mask: bool
    reset_position_ids: bool


@dataclass(frozen=True)
class TrainingRun:
    """Everything pretrain() takes: built at train.py's door, once this process has joined its process group
    (the data's share and the stored config are this rank's)."""
    model: ModelConfig                # the model (its embedding rows: the tokenizer's, set when it is built)
    tokenizer: TokenizerRun
    data: DataRun                     # the data keys with this rank's share, the length schedule among them
    checkpoint: CheckpointRun         # saving and resuming; `save` and `load` are its
    preflight: PreflightRun           # the checks made before a step is spent
    optimizer: OptimizerRun
    lr_schedule: LrSchedule
    step: StepRun
    loop: LoopRun
    monitor: MonitorRun               # console, TensorBoard, W&B
    banner: RunBanner
    deepspeed_config: dict            # the DeepSpeed JSON deepspeed.initialize takes
    compile_blocks: bool              # torch.compile each transformer layer
    rank: int                         # rank 0 prints
