"""The model to export: a checkpoint folder `<save>/global_stepN` (or a `save` folder, for its latest),
loaded by the one loader (megatron.checkpoint.inference_model.load) on the CPU in fp32."""
import pathlib
from dataclasses import dataclass

import torch

from megatron.checkpoint.folder import CheckpointError, missing_why, split_checkpoint_path
from megatron.checkpoint.inference_model import load
from megatron.model import GPTModel
from megatron.model.model_config import ModelConfig
from megatron.neox_arguments import NeoXArgs
from megatron.tokenizer import Tokenizer

from .errors import ExportError


@dataclass
class Source:
    config: ModelConfig      # the model as the checkpoint records it
    model: GPTModel          # fp32, eval mode, on the CPU
    tokenizer: Tokenizer
    step: int


def load_source(input_dir, config_files=None) -> Source:
    """`input_dir` is `<save>/global_stepN` (upstream's shape) or a `save` folder (its `latest`);
    `config_files` the run's YAML files, default none: the checkpoint describes its own model (its merged
    config, so a method chosen with `--set pos-emb=...` is the one built). Files given must agree with it."""
    folder = pathlib.Path(input_dir)
    if not folder.is_dir():
        raise ExportError(f"--input_dir {folder} {missing_why(folder)}. Give a checkpoint folder "
                          "<save>/global_stepN written by train.py (or the `save` folder itself for its latest).")
    for path in config_files or ():
        if not pathlib.Path(path).is_file():
            raise ExportError(f"--config_file {path} does not exist; give the YAML config the run was trained with.")
    load_dir, iteration = split_checkpoint_path(folder)
    try:
        run = None if not config_files else NeoXArgs.from_ymls(
            [str(p) for p in config_files], {"load": str(load_dir), "iteration": iteration}).inference_run()
        loaded = load(folder, run, device="cpu", dtype=torch.float32)
    except CheckpointError as err:
        raise ExportError(f"--input_dir: {err}") from None
    return Source(loaded.config, loaded.model, loaded.tokenizer, loaded.step)
