"""The model to export: a checkpoint folder `<save>/global_stepN` and the config it was trained with,
loaded the way evaluation loads it (megatron.checkpointing.load_model_weights)."""
import pathlib
from dataclasses import dataclass

import torch

from megatron.checkpointing import TAG, CheckpointError, load_model_weights, resolve_tag
from megatron.model import GPTModel
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.resolved import RESOLVED_NAME
from megatron.tokenizer import Tokenizer, build_tokenizer

from .errors import ExportError


@dataclass
class Source:
    neox_args: NeoXArgs
    model: GPTModel          # fp32, eval mode, on the CPU
    tokenizer: Tokenizer
    step: int


def load_source(input_dir, config_files=None) -> Source:
    """`input_dir` is `<save>/global_stepN` (upstream's shape) or a `save` folder (its `latest`);
    `config_files` the run's YAML files, default the checkpoint's own resolved config (every key its
    run's files and `--set` flags gave, so a method chosen with `--set pos-emb=...` is the one built)."""
    folder = pathlib.Path(input_dir)
    if not folder.is_dir():
        raise ExportError(f"--input_dir {folder} does not exist. Give a checkpoint folder "
                          "<save>/global_stepN written by train.py (or the `save` folder itself for its latest).")
    match = TAG.fullmatch(folder.name)
    load, iteration = (folder.parent, int(match.group(1))) if match else (folder, None)
    if not config_files:
        try:
            tag_folder = load / resolve_tag(load, iteration)
        except CheckpointError as err:
            raise ExportError(f"--input_dir: {err}") from None
        resolved = tag_folder / RESOLVED_NAME
        if not resolved.is_file():
            raise ExportError(f"no --config_file given and {tag_folder} has no {RESOLVED_NAME} (a checkpoint "
                              "written before this project kept one); give the run's config with --config_file "
                              "CONFIG.yml (several files merge in order).")
        config_files = [resolved]
    for path in config_files:
        if not pathlib.Path(path).is_file():
            raise ExportError(f"--config_file {path} does not exist; give the YAML config the run was trained with.")
    # The checkpoint decides what to load; the config decides what model to build (checked against it).
    neox_args = NeoXArgs.from_ymls([str(p) for p in config_files], {"load": str(load), "iteration": iteration})
    tokenizer = build_tokenizer(neox_args)
    model = GPTModel(neox_args, tokenizer.padded_vocab_size)
    step = load_model_weights(neox_args, model)
    return Source(neox_args, model.to(torch.float32).eval(), tokenizer, step)
