"""The one way a trained model is loaded for inference (evaluation, generation, lm-eval, export, plots):
`load(checkpoint)` reads the checkpoint once (`open_checkpoint`: its model-states file, weights memory-mapped)
and returns the model its ModelConfig describes with its weights loaded exactly, the tokenizer, the config
and the training record, the model on one device in one dtype by one rule."""
import pathlib
from dataclasses import dataclass

import torch

from megatron.checkpoint_folder import RESOLVED_NAME, CheckpointError, read_pruning_aware, split_checkpoint_path
from megatron.checkpointing import load_weights_of, read_client_state, stored_model_config
from megatron.model import GPTModel
from megatron.model.model_config import ModelConfig
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.to_model import model_config
from megatron.tokenizer import Tokenizer, build_tokenizer


def inference_device_and_dtype(neox_args, device=None) -> tuple[torch.device, torch.dtype]:
    """This rank's device (or `device`), and the config's precision there: bf16/fp16 only where the
    hardware runs them fast; CPU runs in fp32."""
    if device is None:
        device = f"cuda:{neox_args.local_rank}" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(neox_args.precision, torch.float32)
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
    neox_args: NeoXArgs      # the config it was built with
    config: ModelConfig      # what the checkpoint says the model is
    step: int
    trained: TrainingRecord  # what the checkpoint says of its run


def load(checkpoint, neox_args: NeoXArgs | None = None, device=None, dtype: torch.dtype | None = None) -> LoadedModel:
    """The model of `checkpoint`: a `save` folder (its `latest`, or `neox_args.iteration`), one `global_stepN`
    folder, or an OpenCheckpoint already read. Without `neox_args` the config is the checkpoint's own merged
    config; a config given must agree with the checkpoint on the model (a CheckpointError names every
    difference), and keeps its per-run choices (attention-window, rotary-scaling, attention-impl), which
    its ModelConfig carries. `device` and `dtype` default to `inference_device_and_dtype`'s rule."""
    if isinstance(checkpoint, OpenCheckpoint):
        return _build(checkpoint, neox_args, device, dtype)
    load_dir, iteration = split_checkpoint_path(checkpoint, neox_args.iteration if neox_args else None)
    # The step's own config is read after its model-states file: a step pruned between them is read again
    return read_pruning_aware(load_dir, iteration, lambda where: _build(_open_step(where), neox_args, device, dtype))


def _build(opened: OpenCheckpoint, neox_args: NeoXArgs | None, device, dtype) -> LoadedModel:
    if neox_args is None:
        neox_args = _checkpoint_args(opened.where, opened.config)
    tokenizer = build_tokenizer(neox_args)
    model = GPTModel(model_config(neox_args, tokenizer.padded_vocab_size))
    step = load_weights_of(opened.state, opened.where, neox_args, model)  # checks the model against the record first
    device, default_dtype = inference_device_and_dtype(neox_args, device)
    model = model.to(device=device, dtype=dtype or default_dtype).eval()
    return LoadedModel(model, tokenizer, neox_args, opened.config, step, opened.trained)


def _checkpoint_args(where: pathlib.Path, saved: ModelConfig) -> NeoXArgs:
    """The config of the run that wrote checkpoint `where`: its merged config, else (a checkpoint written
    before checkpoints kept one) the model its ModelConfig records, on the config's other defaults."""
    at = {"load": str(where.parent), "iteration": int(where.name.removeprefix("global_step"))}
    if (where / RESOLVED_NAME).is_file():
        return NeoXArgs.from_ymls([where / RESOLVED_NAME], at, world_size=1)
    values = {k: v for k, v in saved.config_values().items() if v is not None}
    if "tokenizer_type" not in values:
        raise CheckpointError(f"{where} records neither its merged config ({RESOLVED_NAME}) nor its tokenizer; "
                              "give the run's config (its YAML files) to load it.")
    sources = {k: f"checkpoint {where} (model_config)" for k in values}
    no_batch = {"train_micro_batch_size_per_gpu": 1}  # a config must name one; loading a model uses none
    return NeoXArgs.from_dict({**values, **no_batch, **at}, sources, world_size=1)
