"""Checks made at start-up, before any data is read or any step is spent: what would otherwise fail
only at the first save (after training has run), or after an evaluation's scores were computed (which
are then lost), or deep inside a library with a traceback.

    training:   precision the device runs; memory for the model; `save` a folder this process can
                write, held by one run at a time (a lock naming the PID that holds it); `load` a folder
    evaluation: `eval-results-dir` writable; memory for the longest length

Every rank checks, the problems are shared, and every rank raises the same error, so no rank is left
waiting in a collective for one that stopped.
"""
import errno
import fcntl
import os
import pathlib
import socket
import tempfile

import psutil
import torch

from megatron.neox_arguments import NeoXArgsError

LOCK_NAME = ".lock"  # in the save folder; flock'ed while a run trains into it (released when it exits)


class PreflightError(NeoXArgsError):
    """The run would fail later (or lose its results) for a reason known now."""


# ----------------------------------------------------------------------------------------- folders
def folder_problem(path, key: str, where: str | None = None) -> str | None:
    """Why `path` (config key `key`) cannot take new files, or None. Creates the folder, then creates
    and removes a file in it: the real test (permission bits say nothing for root, and nothing about
    read-only or immutable file systems)."""
    path = pathlib.Path(path)
    where = f"{where}: " if where else ""
    for parent in (path, *path.parents):
        if parent.exists() and not parent.is_dir():
            what = "is" if parent == path else f"is under {parent}, which is"
            return (f"{where}{key} {path} {what} a file, not a folder. Give the path of a folder (it is "
                    "created if missing).")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".write-test-"):  # a named file, as a save makes
            pass
    except OSError as err:
        return (f"{where}{key} {path} is not writable by this process ({err.strerror}). Choose a folder you "
                "can write to, or fix its permissions.")
    return None


def _load_problem(neox_args) -> str | None:
    load = neox_args.load
    if load and os.path.exists(load) and not os.path.isdir(load):
        return (f"{neox_args.config_sources.get('load', 'the config')}: load {load} is a file, not a checkpoint "
                "folder. Point `load` at the `save` folder of a training run (the folder holding `latest` and "
                "global_stepN/).")
    return None


class SaveFolderLock:
    """`<save>/.lock`, held by rank 0 while a run trains into that folder: a second run on the same save
    folder stops at once, naming the first one's PID, instead of the two overwriting each other's
    partial checkpoints. It is an flock, so a run that crashed or was killed leaves no stale lock; a run
    that ends removes the file (while still holding it, and a taker checks that the file it locked is
    still the one at the path, so two runs can never both hold it)."""

    def __init__(self, save):
        self.path = pathlib.Path(save) / LOCK_NAME if save else None
        self.fd = None

    def acquire(self) -> str | None:
        """Take the lock; the problem when another process holds it."""
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
                os.close(fd)
                if err.errno not in (errno.EWOULDBLOCK, errno.EACCES):
                    raise
                return (f"save folder {self.path.parent} is in use by {holder} (it holds {self.path}). Two "
                        "runs saving into one folder would overwrite each other's checkpoints: wait for it to "
                        "finish, stop it, or give this run another `save`.")
            if _same_file(fd, self.path):
                break
            os.close(fd)  # the holder removed it between our open and flock: take the new one
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"PID {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        self.fd = fd
        return None

    def release(self) -> None:
        if self.fd is not None:
            self.path.unlink(missing_ok=True)
            os.close(self.fd)  # releases the flock
            self.fd = None


def _same_file(fd: int, path: pathlib.Path) -> bool:
    try:
        return os.path.samestat(os.fstat(fd), os.stat(path))
    except FileNotFoundError:
        return False


# ------------------------------------------------------------------------------------------ memory
def _parameters(neox_args, vocab_size: int) -> int:
    """Parameter count of the decoder, from the config (biases and norms left out: a lower bound)."""
    h, layers = neox_args.hidden_size, neox_args.num_layers
    ffn = neox_args.intermediate_size or 4 * h
    per_layer = 4 * h * h + 2 * h * ffn
    embeddings = vocab_size * h * (2 if neox_args.no_weight_tying else 1)
    if neox_args.pos_emb == "learned":
        embeddings += neox_args.max_position_embeddings * h
    return layers * per_layer + embeddings


def _available_bytes() -> tuple[int, str]:
    from deepspeed.accelerator import get_accelerator  # here: the preprocessing tool imports this module too
    accelerator = get_accelerator()
    if accelerator.device_name() == "cuda" and torch.cuda.is_available():
        free, _ = torch.cuda.mem_get_info()
        return free, "free on the GPU"
    return psutil.virtual_memory().available, "of available memory"


def memory_problem(neox_args, training: bool, vocab_size: int) -> str | None:
    """A lower bound of the memory one rank needs, against what the device has free: only a run that
    certainly cannot fit is refused (the bound leaves out most activations, buffers and fragmentation).
    Training: fp32 weights, gradients and two Adam moments (16 bytes a parameter, ZeRO stages shard
    them, so they are divided by the ranks), one hidden state per layer and the logits of a micro-batch.
    Evaluation: fp32 weights and the logits of one forward at the longest length."""
    params = _parameters(neox_args, vocab_size)
    if training:
        shards = neox_args.world_size if neox_args.zero_optimization.get("stage", 0) else 1
        state = 16 * params // shards
        micro, length = neox_args.train_micro_batch_size_per_gpu, neox_args.seq_length
        activations = 4 * micro * length * (neox_args.hidden_size * neox_args.num_layers + vocab_size)
        what = f"{params:,} parameters x 16 bytes (weights, gradients, Adam)"
    else:
        state = 4 * params
        micro, length = neox_args.eval_micro_batch_size, max(neox_args.eval_lengths)
        activations = 4 * micro * length * (neox_args.hidden_size + vocab_size)
        what = f"{params:,} parameters x 4 bytes"
    available, kind = _available_bytes()
    if state + activations <= available:
        return None
    gib = 2 ** 30
    return (f"this model cannot fit: it needs at least {(state + activations) / gib:,.1f} GiB ({what}: "
            f"{state / gib:,.1f} GiB; activations of {micro} sequence(s) of {length:,} tokens: "
            f"{activations / gib:,.1f} GiB), but there are {available / gib:,.1f} GiB {kind}. Lower hidden-size, "
            "num-layers, the sequence length or the micro-batch size (config keys of this run).")


def _precision_problem(neox_args) -> str | None:
    from deepspeed.accelerator import get_accelerator
    accelerator = get_accelerator()
    supported = {"fp16": accelerator.is_fp16_supported(), "bf16": accelerator.is_bf16_supported()}
    if neox_args.precision in supported and not supported[neox_args.precision]:
        where = neox_args.config_sources.get("precision") or neox_args.config_sources.get(neox_args.precision)
        return (f"{where or 'the config'}: precision {neox_args.precision} is not supported on this device "
                f"({accelerator.device_name()}). Use precision: fp32"
                + (" or bf16" if supported["bf16"] else "") + ", or run on a GPU.")
    return None


# ------------------------------------------------------------------------------------------ checks
def check_training(neox_args, vocab_size: int) -> SaveFolderLock:
    """Raise a PreflightError (on every rank) for anything that would stop training later; returns the
    save folder's lock, held by rank 0 (release it when the run ends)."""
    problems = [_precision_problem(neox_args), memory_problem(neox_args, True, vocab_size), _load_problem(neox_args)]
    lock = SaveFolderLock(neox_args.save if neox_args.rank == 0 else None)
    if neox_args.save:
        problems.append(folder_problem(neox_args.save, "save", neox_args.config_sources.get("save", "the config")))
        if lock.path is not None and not problems[-1]:
            problems.append(lock.acquire())
    try:
        raise_together(problems)
    except PreflightError:
        lock.release()
        raise
    return lock


def check_evaluation(neox_args, vocab_size: int) -> None:
    """Raise a PreflightError (on every rank) before a checkpoint is scored for nothing."""
    problems = [_load_problem(neox_args), memory_problem(neox_args, False, vocab_size)]
    if neox_args.rank == 0:  # only rank 0 writes the result file
        problems.append(folder_problem(neox_args.eval_results_dir, "eval-results-dir",
                                       neox_args.config_sources.get("eval_results_dir", "the config")))
    raise_together(problems)


def raise_together(problems) -> None:
    """Raise one PreflightError with every rank's problems (None entries are no problem), on every rank."""
    problems = [p for p in problems if p]
    if torch.distributed.is_available() and torch.distributed.is_initialized() \
            and torch.distributed.get_world_size() > 1:
        everyone = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(everyone, problems)
        problems = list(dict.fromkeys(p for rank_problems in everyone for p in rank_problems))
    if problems:
        raise PreflightError(" ".join(problems))
