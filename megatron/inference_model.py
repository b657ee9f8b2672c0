"""The one way a trained model is loaded for inference (evaluation, generation, lm-eval, export, plots):
`load(checkpoint)` reads the model the checkpoint describes (its ModelConfig and merged config), builds it,
loads its weights exactly, and puts it on one device in one dtype by one rule."""
import pathlib
from dataclasses import dataclass

import torch

from megatron.checkpoint_folder import CheckpointError, read_pruning_aware, split_checkpoint_path
from megatron.checkpointing import load_model_weights, read_client_state, stored_model_config
from megatron.model import GPTModel
from megatron.model.model_config import ModelConfig
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.resolved import RESOLVED_NAME
from megatron.tokenizer import Tokenizer, build_tokenizer


def inference_device_and_dtype(neox_args, device=None) -> tuple[torch.device, torch.dtype]:
    """This rank's device (or `device`), and the config's precision there: bf16/fp16 only where the
    hardware runs them fast; CPU runs in fp32."""
    if device is None:
        device = f"cuda:{neox_args.local_rank}" if torch.cuda.is_available() else "cpu"
    device = torch.device(device)
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(neox_args.precision, torch.float32)
    return device, dtype if device.type == "cuda" else torch.float32


@dataclass
class LoadedModel:
    model: GPTModel          # in eval mode, on `device` in `dtype`
    tokenizer: Tokenizer
    neox_args: NeoXArgs      # the config it was built with (`load` and `iteration` name the checkpoint)
    config: ModelConfig      # what the checkpoint says the model is
    step: int


def load(checkpoint, neox_args: NeoXArgs | None = None, device=None, dtype: torch.dtype | None = None) -> LoadedModel:
    """The model of `checkpoint`: a `save` folder (its `latest`, or `neox_args.iteration`) or one
    `global_stepN` folder. Without `neox_args` the config is the checkpoint's own merged config; a config
    given must agree with the checkpoint on the model (a CheckpointError names every difference), and
    keeps its per-run choices (attention-window, rotary-scaling, attention-impl). `device` and `dtype`
    default to `inference_device_and_dtype`'s rule."""
    load_dir, iteration = split_checkpoint_path(checkpoint, neox_args.iteration if neox_args else None)
    # `latest` is read once: every later read opens the step it named (pruned meanwhile: read_pruning_aware)
    return read_pruning_aware(load_dir, iteration, lambda where: _load_step(where, neox_args, device, dtype))


def _load_step(where: pathlib.Path, neox_args: NeoXArgs | None, device, dtype) -> LoadedModel:
    load_dir = where.parent
    saved = stored_model_config(read_client_state(load_dir, where.name), where)
    step = int(where.name.removeprefix("global_step"))
    if neox_args is None:
        neox_args = _checkpoint_args(where, saved)
    elif (pathlib.Path(neox_args.load or "") != load_dir) or neox_args.iteration != step:
        neox_args = NeoXArgs.from_dict({**neox_args.user_values(), "load": str(load_dir), "iteration": step},
                                       {**neox_args.nested_sources, **neox_args.config_sources},
                                       neox_args.config_files, neox_args.world_size)
    tokenizer = build_tokenizer(neox_args)
    model = GPTModel(neox_args, tokenizer.padded_vocab_size)
    step = load_model_weights(neox_args, model)  # checks the config against `saved` first
    device, default_dtype = inference_device_and_dtype(neox_args, device)
    model = model.to(device=device, dtype=dtype or default_dtype).eval()
    return LoadedModel(model, tokenizer, neox_args, saved, step)


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
