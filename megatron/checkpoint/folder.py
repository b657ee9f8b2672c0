"""Where a checkpoint is: a `save` folder's steps, the one `latest` names, or a `global_stepN` folder
itself. No torch or DeepSpeed here: the config loader reads a checkpoint's stored config before either
is imported (megatron/neox_arguments/from_checkpoint.py)."""
import errno
import os
import pathlib
import re

from megatron.errors import NeoXArgsError
from megatron.quoting import quote

TAG = re.compile(r"global_step(\d+)")
# The run's merged config, kept in each step folder beside the weights (megatron/neox_arguments/resolved.py).
RESOLVED_NAME = "resolved_config.yml"


class CheckpointError(NeoXArgsError):
    """A checkpoint that is missing, incomplete or made by a different model than the one loading it."""


def missing_why(path) -> str:
    """Why `path` is not there, in words: "does not exist", or that it is a link loop (ELOOP) or a link to
    nothing -- a link that exists but leads nowhere is not a missing folder, and saying so sends the user
    looking in the wrong place."""
    path = pathlib.Path(path)
    try:
        os.stat(path)
    except OSError as err:
        if err.errno == errno.ELOOP:
            return "is a symbolic link loop (ELOOP: following its links comes back to them); fix or remove the link"
        if path.is_symlink():
            return f"is a symbolic link to {quote(os.readlink(path), 100)}, which does not exist; fix or remove the link"
        return "does not exist"
    return "is a file, not a folder" if not path.is_dir() else "exists"


def split_checkpoint_path(path, iteration: int | None = None) -> tuple[pathlib.Path, int | None]:
    """(the `save` folder, the step) of `path`: a `global_stepN` folder is step N of its parent; any
    other folder is a `save` folder, at `iteration` (None: the one `latest` names)."""
    path = pathlib.Path(path)
    match = TAG.fullmatch(path.name)
    return (path.parent, int(match.group(1))) if match and path.is_dir() else (path, iteration)


def checkpoint_steps(directory) -> list[int]:
    """The steps of the complete checkpoints in `directory`, ascending."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        return []
    return sorted(int(m.group(1)) for p in directory.iterdir() if (m := TAG.fullmatch(p.name)) and p.is_dir())


def resolve_tag(load_dir, iteration: int | None = None) -> str:
    """The checkpoint folder to load: `global_step<iteration>` when asked for, else the one `latest`
    names. Every way of not finding one is an error that says what is there instead."""
    load_dir = pathlib.Path(load_dir)
    if not load_dir.is_dir():
        raise CheckpointError(f"checkpoint directory {load_dir} (config key `load`) {missing_why(load_dir)}. Point "
                              "`load` at the `save` directory of a training run.")
    steps = checkpoint_steps(load_dir)
    found = f"It holds checkpoints for steps {steps}." if steps else "It holds no checkpoints."
    if iteration is not None:
        tag = f"global_step{iteration}"
        if iteration not in steps:
            why = missing_why(load_dir / tag)
            there = f" ({tag} {why})" if why not in ("does not exist", "exists") else \
                " (older steps are removed when the run keeps only its newest: keep-last-n-checkpoints)" \
                if steps and iteration < steps[0] else ""
            raise CheckpointError(f"{load_dir} has no checkpoint {tag} (config key `iteration`){there}. {found}")
        return tag
    latest = load_dir / "latest"
    if not latest.is_file():
        raise CheckpointError(f"{load_dir} has no `latest` file naming its newest checkpoint. {found} "
                              "Set `iteration` to load one of them.")
    with open(latest, "rb") as fh:  # a step's name is short: a huge file is not read whole, nor quoted
        tag = fh.read(4096).decode("utf-8", "replace").strip()
    if not TAG.fullmatch(tag):  # empty, or a path: never a folder outside the checkpoint directory
        raise CheckpointError(f"{latest} should name a checkpoint folder like global_step100 but holds {quote(tag)} "
                              f"(damaged or edited). {found} Set `iteration` to load one of them.")
    if not (load_dir / tag).is_dir():
        why = missing_why(load_dir / tag)
        there = f"; {tag} there {why}" if why not in ("does not exist", "exists") else ""
        raise CheckpointError(f"{latest} names {tag!r}, which is not in {load_dir}{there}. {found} "
                              "Set `iteration` to load one of them.")
    return tag


def removed_while_read(folder) -> str:
    """A checkpoint found and then gone: pruned by the run still writing that folder (evaluating while
    training, with keep-last-n-checkpoints), not damaged, and not a step anyone named."""
    folder = pathlib.Path(folder)
    latest = folder.parent / "latest"
    try:
        with open(latest, "rb") as fh:
            newest = fh.read(4096).decode("utf-8", "replace").strip()
    except OSError:
        newest = None
    return (f"{folder} was removed while it was being read: the run writing {folder.parent} keeps only its newest "
            f"checkpoints (keep-last-n-checkpoints) and pruned it. Run again to load the newest"
            + (f" ({quote(newest)})" if newest else "") + ", or set `iteration` to a step that is kept.")


def read_pruning_aware(load_dir, iteration: int | None, read):
    """read(global_stepN folder) of the step `iteration` names (None: the one `latest` names). A step that
    vanishes while it is read was pruned by the run saving into `load_dir`: read again once on the step
    `latest` names then, when `latest` chose it; otherwise (or pruned again) one paragraph saying so --
    never 'damaged', nor a config key `iteration` nobody set."""
    for attempt in (1, 2):
        folder = pathlib.Path(load_dir) / resolve_tag(load_dir, iteration)
        try:
            return read(folder)
        except (NeoXArgsError, OSError):
            if folder.is_dir():
                raise
            if iteration is not None or attempt == 2:
                raise CheckpointError(removed_while_read(folder)) from None
