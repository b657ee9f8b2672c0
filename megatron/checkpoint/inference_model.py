"""The one way a trained model is loaded for inference (evaluation, generation, lm-eval, export, plots):
`load(checkpoint)` reads the checkpoint once (`open_checkpoint`: its model-states file, weights memory-mapped)
and returns the model its ModelConfig describes with its weights loaded exactly, the tokenizer, the config
and the training record, the model on one device in one dtype by one rule. A run's side of loading (its model and
the keys that load it) is an `InferenceRun` (run_keys.py), which the config package builds."""
import os
import pathlib
from dataclasses import dataclass, fields, replace

import torch

from megatron.checkpoint.folder import RESOLVED_NAME, CheckpointError, read_pruning_aware, split_checkpoint_path
from megatron.checkpoint.checkpointing import check_compatible, load_weights, read_client_state, stored_model_config
from megatron.checkpoint.run_keys import InferenceRun
from megatron.model import GPTModel
from megatron.errors import NeoXArgsError
from megatron.model.model_config import ModelConfig, per_run_option_keys, run_choices
from megatron.tokenizer import Tokenizer, make_tokenizer, padded_tokenizer, padded_vocab_size


def inference_device_and_dtype(run: InferenceRun, device=None) -> tuple[torch.device, torch.dtype]:
    """This rank's device (or `device`), and the config's precision there: bf16/fp16 only where the
    hardware runs them fast; CPU runs in fp32."""
    return _device_and_dtype(run.precision, run.local_rank, device)


def _device_and_dtype(precision: str | None, local_rank: int, device=None) -> tuple[torch.device, torch.dtype]:
    if device is None:
        device = f"cuda:{local_rank}" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision, torch.float32)
    return device, dtype if device.type == "cuda" else torch.float32


@dataclass(frozen=True)
class TrainingRecord:
    """What a checkpoint says of the run that wrote it (train.py's client state)."""
    step: int                            # the step its model-states file says (checked against its folder on load)
    consumed_train_samples: int | None   # None: a checkpoint that does not count them
    config: dict | None                  # the run's config as train.py stored it (client state `neox_args`)


@dataclass
class OpenCheckpoint:
    """A checkpoint folder read once: its model-states (weights memory-mapped), the model and run it records."""
    where: pathlib.Path      # the global_stepN folder
    state: dict              # read_client_state's
    config: ModelConfig      # what the checkpoint says the model is
    trained: TrainingRecord


def open_checkpoint(checkpoint, iteration: int | None = None) -> OpenCheckpoint:
    """Checkpoint `checkpoint`: a `save` folder (its `latest`, or `iteration`) or one `global_stepN` folder."""
    load_dir, iteration = split_checkpoint_path(checkpoint, iteration)
    # `latest` is read once; a step pruned while it is read (a run saving meanwhile) is read_pruning_aware's.
    # Once read, the weights are memory-mapped, so a prune after this leaves them readable.
    return read_pruning_aware(load_dir, iteration, _open_step)


def _open_step(where: pathlib.Path) -> OpenCheckpoint:
    state = read_client_state(where.parent, where.name)
    trained = TrainingRecord(state.get("iteration"), state.get("consumed_train_samples"), state.get("neox_args"))
    return OpenCheckpoint(where, state, stored_model_config(state, where), trained)


@dataclass
class LoadedModel:
    model: GPTModel          # in eval mode, on `device` in `dtype`
    tokenizer: Tokenizer
    run: InferenceRun | None  # the run given to `load` (None: the checkpoint alone described the model)
    config: ModelConfig      # what the checkpoint says the model is
    step: int
    trained: TrainingRecord  # what the checkpoint says of its run


def load(checkpoint, run: InferenceRun | None = None, device=None, dtype: torch.dtype | None = None) -> LoadedModel:
    """The model of `checkpoint`: an OpenCheckpoint already read, a `save` folder (its `latest`, or
    `run.iteration`) or one `global_stepN` folder. One pass: the checkpoint's record (read once), a run's own
    choices (attention-window, rotary-scaling, attention-impl, ...) applied to it with `dataclasses.replace`, the
    model built, its weights loaded exactly. The choices are those of `run` (a config's model and keys) where one
    is given, whose model must agree with the record (a CheckpointError names every difference), else those of
    the run that trained it. `device` and `dtype` default to `inference_device_and_dtype`'s rule (the training
    run's precision where no run is given)."""
    opened = checkpoint
    if not isinstance(opened, OpenCheckpoint):
        opened = open_checkpoint(checkpoint, run.iteration if run else None)
    saved = opened.config
    if run is not None:  # the config's choices, its lengths and tokenizer files too (it may score longer lengths)
        tokenizer = run_tokenizer(run)
        wanted = replace(run.model, padded_vocab_size=tokenizer.padded_vocab_size)
        choices = {f.name: getattr(wanted, f.name) for f in fields(ModelConfig) if not f.compare}
        choices.update(lengths=wanted.lengths, tokenizer_files=wanted.tokenizer_files)
        precision, local_rank = run.precision, run.local_rank
    else:  # those the training run stored with the checkpoint
        tokenizer = _recorded_tokenizer(opened)
        trained = opened.trained.config if isinstance(opened.trained.config, dict) else {}
        choices = _trained_choices(saved, trained, opened.where)
        precision, local_rank = trained.get("precision"), int(os.environ.get("LOCAL_RANK", 0))
    device, default_dtype = _device_and_dtype(precision, local_rank, device)
    if run is not None:  # before a model of the wrong kind is built
        check_compatible(saved, wanted, opened.where, config_read_from=run.config_read_from)
    model = GPTModel(replace(saved, padded_vocab_size=tokenizer.padded_vocab_size, **choices))
    step = load_weights(opened.state, opened.where, model)
    return LoadedModel(model.to(device=device, dtype=dtype or default_dtype).eval(), tokenizer, run, saved, step,
                       opened.trained)


def run_tokenizer(run: InferenceRun) -> Tokenizer:
    """The tokenizer of the run's model, its embedding rows padded to make-vocab-size-divisible-by."""
    files = run.model.tokenizer_files
    return padded_tokenizer(run.model.tokenizer_type, files.get("vocab_file"), files.get("merge_file"),
                            run.vocab_divisible_by)


def _recorded_tokenizer(opened: OpenCheckpoint) -> Tokenizer:
    """The tokenizer the checkpoint records, with the embedding rows it records."""
    saved, where = opened.config, opened.where
    if saved.tokenizer_type is None:
        raise CheckpointError(f"{where} records no tokenizer with its model (model_config has no tokenizer_type); "
                              f"give the run's config (its YAML files, or its {RESOLVED_NAME}) to load it.")
    tokenizer = make_tokenizer(saved.tokenizer_type, saved.tokenizer_files.get("vocab_file"),
                               saved.tokenizer_files.get("merge_file"))
    needed = padded_vocab_size(tokenizer, 1)
    if not isinstance(saved.padded_vocab_size, int) or saved.padded_vocab_size < needed:
        raise CheckpointError(f"{where} records {saved.padded_vocab_size!r} embedding rows, but its tokenizer "
                              f"({saved.tokenizer_type}) has {needed} ids: the record was damaged or edited. Give the "
                              "run's config (its YAML files) to load it, or load another step (`iteration`).")
    tokenizer.padded_vocab_size = saved.padded_vocab_size
    return tokenizer


def _trained_choices(saved: ModelConfig, trained: dict, where) -> dict:
    """The choices of the run that wrote checkpoint `where` (its stored config; a key it lacks keeps its default)."""
    try:
        return run_choices(trained, per_run_option_keys(saved))
    except (NeoXArgsError, TypeError, ValueError) as err:
        raise CheckpointError(f"the checkpoint {where} records a run config this project cannot use ({err}); give "
                              "the run's config (its YAML files) to load it, or load another step (`iteration`).") from None
