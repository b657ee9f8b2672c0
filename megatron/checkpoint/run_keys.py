"""The few keys of a run's config that saving, resuming and loading a checkpoint read, as two typed records
the config package builds (megatron/neox_arguments/to_checkpoint.py): below it, code takes these and a
`ModelConfig`, never the run config itself. No torch here: the config package imports this module."""
from dataclasses import dataclass

from megatron.length_schedule import LengthSchedule
from megatron.model.model_config import ModelConfig


@dataclass(frozen=True)
class CheckpointRun:
    """What training's saves and its resume take from the run (the model is the engine's own `.config`).
    Built once, when training starts: what a save writes of the config is the config the run trains with."""
    save: str | None                     # where checkpoints are written (None: nowhere)
    load: str | None                     # where the run resumes from, or a fine-tune takes its weights
    iteration: int | None                # the step to load (None: `latest`)
    finetune: bool                       # load the weights only and start at step 0 (unless it saved in `save` already)
    no_load_optim: bool                  # resume with a fresh optimizer and LR schedule
    no_load_rng: bool                    # resume with the run's own seeds, not the checkpoint's RNG state
    keep_last_n_checkpoints: int | None  # older steps are removed after each save (None: all kept)
    config_files: dict                   # {file name: text}: the run's config files, kept in configs/
    resolved_yaml: str                   # the merged config (--set included), kept as resolved_config.yml
    stored_config: dict                  # the whole config, kept in the model states (client-state key `neox_args`)
    length_schedule: LengthSchedule | None  # the stage of the saved step is kept with it (None: one length)
    config_read_from: tuple = ()         # every file some key of the config was read from (its sources)


@dataclass(frozen=True)
class InferenceRun:
    """What a run that loads a trained model (evaluation, generation, export, plots) asks of it: its model,
    which the checkpoint must record, with the run's own choices; where the checkpoint is; the dtype rule."""
    model: ModelConfig                   # the run's model (its embedding rows: the tokenizer's, set on load)
    load: str | None                     # the checkpoint's `save` folder
    iteration: int | None                # the step (None: `latest`)
    vocab_divisible_by: int              # make-vocab-size-divisible-by: the tokenizer's rows are padded to it
    precision: str | None                # fp32 | bf16 | fp16: the inference dtype where the hardware runs it fast
    local_rank: int                      # this process's device on its machine
    config_read_from: tuple = ()         # every file some key of the config was read from (its sources)
