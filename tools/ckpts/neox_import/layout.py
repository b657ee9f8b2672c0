"""Read a checkpoint in DeepSpeed's pipeline layout, as upstream GPT-NeoX and the KERPLE fork write it
(even with pipe-parallel-size 1):

    <save>/latest                                          "global_stepN"
    <save>/global_stepN/mp_rank_00_model_states.pt         iteration, args (sizes), DeepSpeed's keys
    <save>/global_stepN/layer_XX-model_00-model_states.pt  one file per pipeline stage that has weights
    <save>/global_stepN/configs/*.yml                      the run's config files

Stages, for L layers: 00 embedding; 01 a function (no file); 02..L+1 the transformer layers; L+2 a
function; L+3 the final norm; L+4 the output layer, only with no-weight-tying (a tied output layer
is a function of stage 00's weights and writes no file).
"""
import pathlib
import re
from dataclasses import dataclass

import torch

from megatron.errors import NeoXArgsError
from megatron.checkpoint.plain_load import NotPlainData, load_plain

LAYER_FILE = re.compile(r"layer_(\d+)-model_(\d+)-model_states\.pt")
STEP = re.compile(r"global_step(\d+)")


class CheckpointImportError(NeoXArgsError):
    """A checkpoint the importer cannot convert; printed without a traceback by run_cli."""


@dataclass
class Stages:
    folder: pathlib.Path
    iteration: int
    args: dict              # the fork's stored sizes (num_layers, hidden_size, ...); may be empty
    embedding: dict         # stage 00
    layers: list            # one dict per transformer layer
    final_norm: dict        # stage L+3
    output: dict | None     # stage L+4 (no-weight-tying), else None


def checkpoint_folder(source) -> pathlib.Path:
    """`source` is a `save` directory (with `latest` or one global_stepN) or a global_stepN folder."""
    source = pathlib.Path(source)
    if not source.is_dir():
        raise CheckpointImportError(f"{source} does not exist or is not a directory. Give the `save` directory of the "
                           "GPT-NeoX / KERPLE run (the one holding `latest` and global_stepN/), or one "
                           "global_stepN folder.")
    if STEP.fullmatch(source.name):
        return source
    steps = sorted((p for p in source.iterdir() if p.is_dir() and STEP.fullmatch(p.name)),
                   key=lambda p: int(STEP.fullmatch(p.name).group(1)))
    latest = source / "latest"
    if latest.is_file():
        tag = latest.read_text().strip()
        if (source / tag).is_dir():
            return source / tag
        raise CheckpointImportError(f"{latest} names {tag!r}, which is not in {source} (it holds "
                           f"{[p.name for p in steps]}). Pass the global_stepN folder to import directly.")
    if len(steps) == 1:
        return steps[0]
    raise CheckpointImportError(f"{source} has no `latest` file and {len(steps)} global_stepN folders "
                       f"({[p.name for p in steps]}); pass the global_stepN folder to import directly.")


def saved_configs(folder: pathlib.Path) -> list[pathlib.Path]:
    """The run's config files NeoX saved beside the weights (configs/*.yml), in name order."""
    return sorted((folder / "configs").glob("*.yml")) if (folder / "configs").is_dir() else []


def _load_layer(path: pathlib.Path) -> dict:
    try:
        # Layer files hold tensors only, so the safe loader reads them.
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise CheckpointImportError(f"cannot read {path}: {err}. The file is damaged or not a DeepSpeed layer file; "
                           "download or copy it again.") from err
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise CheckpointImportError(f"{path} does not hold a dict of tensors, so it is not a DeepSpeed pipeline layer "
                           "file; download or copy it again.")
    return state


def read_model_states(folder: pathlib.Path) -> tuple[int, dict]:
    """(iteration, args) from mp_rank_00_model_states.pt."""
    path = folder / "mp_rank_00_model_states.pt"
    if not path.is_file():
        raise CheckpointImportError(f"{folder} has no mp_rank_00_model_states.pt, which DeepSpeed writes with every "
                           f"checkpoint (contents: {sorted(p.name for p in folder.iterdir())}). Copy the whole "
                           "global_stepN folder.")
    try:
        # Data only, as every checkpoint read (megatron/checkpoint/plain_load.py): DeepSpeed's RNG states (numpy
        # arrays), loss scaler and config are allowed; an object of any other class is refused.
        state = load_plain(path, mmap=False)
    except NotPlainData as err:
        raise CheckpointImportError(str(err)) from None
    except Exception as err:
        raise CheckpointImportError(f"cannot read {path}: {err}. The file is damaged; copy it again.") from err
    if not isinstance(state, dict):
        raise CheckpointImportError(f"{path} holds a {type(state).__name__}, not the dict DeepSpeed writes: it is not a "
                                    "model-states file. Copy the whole global_stepN folder again.")
    match = STEP.fullmatch(folder.name)
    iteration = state.get("iteration", state.get("global_steps"))
    if iteration is None:
        iteration = int(match.group(1)) if match else 0
    return int(iteration), dict(state.get("args") or {})


def read_stages(folder: pathlib.Path, num_layers: int, no_weight_tying: bool) -> Stages:
    """The per-stage state dicts of a checkpoint with `num_layers` layers; a missing or surplus file is
    an error naming it."""
    iteration, args = read_model_states(folder)
    files = {}
    for path in folder.iterdir():
        match = LAYER_FILE.fullmatch(path.name)
        if match:
            if int(match.group(2)) != 0:
                raise CheckpointImportError(f"{path.name} in {folder} belongs to model-parallel rank {int(match.group(2))}: "
                                   "the checkpoint was trained with model-parallel-size > 1, which the importer "
                                   "does not merge. Convert it to model-parallel-size 1 first.")
            files[int(match.group(1))] = path
    if not files:
        raise CheckpointImportError(f"{folder} holds no layer_XX-model_00-model_states.pt files: it is not a pipeline-layout "
                           f"checkpoint (contents: {sorted(p.name for p in folder.iterdir())}). The importer "
                           "reads checkpoints of runs with pipe-parallel-size >= 1, the fork's setting.")
    expected = {0: "the embedding", num_layers + 3: "the final norm"}
    expected.update({i + 2: f"transformer layer {i}" for i in range(num_layers)})
    if no_weight_tying:
        expected[num_layers + 4] = "the output layer (no-weight-tying is set)"
    missing = [f"layer_{i:02d}-model_00-model_states.pt ({what})" for i, what in sorted(expected.items())
               if i not in files]
    surplus = sorted(set(files) - set(expected))
    if missing or surplus:
        hint = (f"The config says num-layers {num_layers} and no-weight-tying {no_weight_tying}"
                + (f"; the checkpoint's own args say num_layers {args['num_layers']}" if "num_layers" in args else "")
                + ". If the config is wrong, pass the run's config with --config_file; if a file is missing, "
                  "copy the whole global_stepN folder again.")
        raise CheckpointImportError(f"{folder} does not match the config: missing {missing or 'nothing'}, unexpected "
                           f"{[files[i].name for i in surplus] or 'nothing'}. {hint}")
    return Stages(folder=folder, iteration=iteration, args=args,
                  embedding=_load_layer(files[0]),
                  layers=[_load_layer(files[i + 2]) for i in range(num_layers)],
                  final_norm=_load_layer(files[num_layers + 3]),
                  output=_load_layer(files[num_layers + 4]) if no_weight_tying else None)
