"""Reading a checkpoint's .pt files as data only. A checkpoint may come from anyone (a colleague, a
download, the NeoX importer's input), and `torch.load(weights_only=False)` constructs whatever object
the file names -- running code the file chose. So every .pt file is read with `weights_only=True`:
tensors, numbers, strings, containers, and only the harmless classes below, which DeepSpeed and this
project really write (found with torch.serialization.get_unsafe_globals_in_checkpoint on fp32, bf16
and ZeRO 1/2/3 checkpoints). Anything else is refused in one paragraph, before it is constructed.

DeepSpeed reads its own files (engine.load_checkpoint, zero_to_fp32) with weights_only=False, so
`verify_folder` first reads every .pt file of a checkpoint folder this way, and `weights_only_engine`
makes DeepSpeed's checkpoint engine read them this way too (the bytes it reads are the bytes checked).
"""
import contextlib
import dataclasses
import pickle
import re
import zipfile

import numpy
import torch
from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
from deepspeed.runtime.zero.config import ZeroStageEnum
from deepspeed.utils.tensor_fragment import fragment_address

from megatron.checkpoint.folder import CheckpointError
from megatron.quoting import quote

_reconstruct = numpy._core.multiarray._reconstruct
_scalar = numpy._core.multiarray.scalar
# Each is data, not behaviour: numpy arrays and scalars (the RNG state numpy.random.get_state() gives;
# aliased for files numpy 1.x wrote), DeepSpeed's loss scale (numbers), ZeRO stage (an int enum), a
# parameter fragment's (start, numel). No function that runs anything beyond building these.
PLAIN_GLOBALS = [
    _reconstruct, (_reconstruct, "numpy.core.multiarray._reconstruct"),
    _scalar, (_scalar, "numpy.core.multiarray.scalar"),
    numpy.ndarray, numpy.dtype, *{type(numpy.dtype(t)) for t in numpy.sctypeDict.values()},
    LossScaler, DynamicLossScaler, ZeroStageEnum, fragment_address,
]


class NotPlainData(CheckpointError):
    """A checkpoint file that holds an object other than plain data: refused, never constructed."""


class NotAPickle(ValueError):
    """A file whose bytes torch's reader cannot follow (random bytes, a truncated or damaged copy): no
    object in it was refused, there is simply no checkpoint to read. Callers call the file damaged."""


# What torch's weights-only reader says when the file really names an object it does not build (a global,
# a function to call, a class to instantiate); anything else it stops at (an unknown opcode, a string
# longer than the file, a list operation on a non-list) is bytes that are not a pickle at all.
_FOREIGN_OBJECT = re.compile(r"GLOBAL \S+|unrecognized function|add_safe_globals|must be imported to load")


def load_plain(path, mmap: bool = True):
    """torch.load of `path` as data only (memory-mapped where the format allows it)."""
    with torch.serialization.safe_globals(PLAIN_GLOBALS):
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap and zipfile.is_zipfile(path))
        except pickle.UnpicklingError as err:
            if "weights only" not in str(err).lower():
                raise
            if not _FOREIGN_OBJECT.search(str(err)):
                raise NotAPickle(f"its bytes are not a checkpoint torch can read, so it is damaged or not a "
                                 f"checkpoint (torch's reader stopped at {quote(_reader_error(str(err)))})") from None
            raise NotPlainData(_refusal(path, str(err))) from None


def as_plain_data(value):
    """`value` with every dataclass instance (an upstream config's `Note`s, ...) written out as a dict:
    what this project saves must read back through `load_plain`, which builds no class."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: as_plain_data(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {k: as_plain_data(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(as_plain_data(v) for v in value)
    return value


def _reader_error(message: str) -> str:
    """The weights-only reader's own words inside torch's wrapping message."""
    inner = message.split("WeightsUnpickler error:", 1)[-1].split("Check the documentation of torch.load")[0]
    return " ".join(inner.split()) or message.strip().splitlines()[0]


def _refusal(path, reason: str) -> str:
    named = re.search(r"(?:GLOBAL|global|function) ([\w.]+)", reason)
    what = f"an object of type {quote(named.group(1))}" if named else \
        f"something other than plain data ({quote(reason.strip().splitlines()[-1] if reason.strip() else '')})"
    return (f"{path} holds {what}, not plain data (tensors, numbers, strings, lists, dicts): reading it would "
            "construct that object, which can run code the file's author chose, so it was not read. A checkpoint is "
            "read as data only; use one written by this project's train.py (or imported with "
            "tools/ckpts/import_neox.py), and never load this one with a tool that unpickles it.")


def verify_folder(folder) -> None:
    """Read every .pt file under a checkpoint folder as data only (memory-mapped: the pickled structure
    is read, not the tensors), so what DeepSpeed later reads its own way holds nothing else."""
    for path in sorted(p for p in _files(folder) if p.suffix == ".pt"):
        try:
            load_plain(path)
        except NotPlainData:
            raise
        except Exception as err:  # truncated or foreign: DeepSpeed would fail too, less clearly
            raise CheckpointError(f"cannot read {path}: {quote(str(err))}. The checkpoint is damaged; load "
                                  "another step with `iteration`.") from None


def _files(folder):
    return (p for p in folder.rglob("*") if p.is_file())


@contextlib.contextmanager
def weights_only_engine(engine):
    """DeepSpeed's checkpoint engine reading as `load_plain` does, for the length of the block."""
    writer = engine.checkpoint_engine
    writer.load = lambda path, map_location=None: load_plain(path, mmap=False)
    try:
        yield
    finally:
        del writer.load
