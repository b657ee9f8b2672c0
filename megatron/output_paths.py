"""Where a tool will write, checked before the expensive part (loading a model, generating,
converting), so that a path that cannot take the output is found at start, not after the work is done.
Nothing is created by a check: the nearest existing folder is tested with a temporary file made and
removed there (permission bits say nothing for root or a read-only file system).

Each function returns why `path` cannot be used, as a sentence starting with the path, or None; the
caller puts the key or flag that named it in front ("command line: sample-output-file: ...")."""
import contextlib
import errno
import os
import pathlib
import tempfile

from megatron.errors import NeoXArgsError
from megatron.quoting import quote


def path_problem(path: str, suffix: str = "") -> str | None:
    """Why the filesystem cannot hold `path` (with `suffix` added to its last name), else None."""
    if "\0" in path:
        return f"{quote(path)} contains a NUL byte, which no path can hold."
    if not path.strip():
        return "is empty; give a path, or remove the key."
    name_max, path_max = _limits(path)
    names = path.split(os.sep)
    for i, name in enumerate(names):
        size = len(os.fsencode(name + (suffix if i == len(names) - 1 else "")))
        if size > name_max:
            added = f" (with the {suffix} the files get)" if suffix and i == len(names) - 1 else ""
            return (f"the name {quote(name, 60)} is {size} bytes long{added}, more than the {name_max} the "
                    "filesystem allows for one file or folder name (NAME_MAX). Choose a shorter name.")
    size = len(os.fsencode(path + suffix))
    if size >= path_max:
        return (f"{quote(path, 60)} is {size} bytes long, more than the {path_max - 1} the filesystem allows "
                "for a whole path (PATH_MAX). Choose a shorter path.")
    return None


def _limits(path: str) -> tuple[int, int]:
    """(NAME_MAX, PATH_MAX) of the filesystem the path would be on: that of its nearest existing folder."""
    folder = os.path.abspath(path)
    while True:
        try:
            return os.pathconf(folder, "PC_NAME_MAX"), os.pathconf(folder, "PC_PATH_MAX")
        except OSError:  # not there yet (or too long, or not readable): ask its parent
            if folder == os.path.dirname(folder):
                return 255, 4096  # Linux's, where no folder on the way says
            folder = os.path.dirname(folder)


def under_a_file(path) -> str | None:
    """`path` is a file where a folder is wanted, or lies under a file."""
    path = pathlib.Path(path)
    for parent in path.parents:
        if parent.exists() and not parent.is_dir():
            return f"{path} is under {parent}, which is a file, not a folder: give a path in a folder."
    return None


def name_too_long(path) -> str | None:
    """A name in `path` is longer than the file system takes (NAME_MAX), or the whole path is (PATH_MAX):
    the check the config makes of its path keys (path_problem), here for paths given otherwise.
    Checked first, since any other look at such a path fails with "File name too long"."""
    problem = path_problem(str(path))
    return None if problem is None else f"{quote(str(path), 80)} cannot be created: {problem}"


def not_writable(path) -> str | None:
    """This process cannot create `path`: the nearest existing folder above it refuses a new file."""
    existing = nearest_existing(path)
    try:
        with tempfile.NamedTemporaryFile(dir=existing, prefix=".write-test-"):
            pass
    except OSError as err:
        return f"{path} cannot be written: {existing} is not writable by this process ({err.strerror})."
    return None


def nearest_existing(path) -> pathlib.Path:
    path = pathlib.Path(path).absolute()
    return next(p for p in (path, *path.parents) if p.exists())


def new_file_problem(path) -> str | None:
    """A new file is to be written at `path`: it must not exist (nothing is overwritten), nor be a folder."""
    if problem := name_too_long(path):
        return problem
    path = pathlib.Path(path)
    if path.is_dir():
        return f"{path} is a folder; give the path of a file to write (e.g. {path / 'samples.jsonl'})."
    if path.exists() or path.is_symlink():
        return (f"{path} exists already, and it is never overwritten: give a new file name, or move the file "
                "away first if it is no longer wanted.")
    return under_a_file(path) or not_writable(path)


def new_folder_problem(path) -> str | None:
    """A new folder is to be filled at `path`: it must be missing or empty (nothing is overwritten)."""
    if problem := name_too_long(path):
        return problem
    path = pathlib.Path(path)
    if path.exists() and not path.is_dir():
        return f"{path} is a file, not a folder: give a new folder."
    if path.is_dir():
        entries = sorted(p.name for p in path.iterdir())
        if entries:
            more = f" and {len(entries) - 8} more" if len(entries) > 8 else ""
            return (f"{path} exists and is not empty (it holds {entries[:8]}{more}); give a new folder (nothing is "
                    "overwritten).")
    return under_a_file(path) or not_writable(path)


class WriteFailed(NeoXArgsError):
    """The output of finished work could not be written (a full disk, quota, I/O error): one paragraph."""


@contextlib.contextmanager
def reported_write(path, what: str, key: str):
    """Writing `what` to `path` (set by config key or flag `key`): an OSError -- the start-up probe passed,
    then the disk filled up -- becomes one paragraph instead of a traceback that loses the work's
    whereabouts. (Checkpoint saves have their own, checkpointing.SaveFailed.)"""
    try:
        yield
    except OSError as err:
        full = err.errno in (errno.ENOSPC, errno.EDQUOT)
        cause = "no space left on the device" if full else (err.strerror or str(err))
        fix = "Free space there" if full else "Fix the file system"
        raise WriteFailed(f"{what} could not be written to {path}: {quote(cause)}. {fix} "
                          f"(or set {key} to a folder on another disk) and run again.") from None
