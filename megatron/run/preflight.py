"""Checks made at start-up, before any data is read or any step is spent: what would otherwise fail
only at the first save (after training has run), or after an evaluation's scores were computed (which
are then lost), or deep inside a library with a traceback.

    before launch (deepy.py): every file the entry point reads exists (data, tokenizer files, the
                `load` checkpoint), so a fresh clone learns what to create in a second, not from the
                ranks a minute later
    training:   the same inputs; precision the device runs; memory for the model; `save` a folder this
                process can write, held by one run at a time (a lock naming the PID that holds it)
    evaluation: the same inputs; `eval-results-dir` writable; memory for the longest length

Every rank checks, the problems are shared, and every rank raises the same error, so no rank is left
waiting in a collective for one that stopped. The checks take the run keys they read (run_keys.py's
`PreflightRun`, built by the config package) and the `ModelConfig`, never the run config itself.
"""
import dataclasses
import errno
import fcntl
import os
import pathlib
import socket
import tempfile
from dataclasses import dataclass

import torch

from megatron.device_memory import available_bytes
from megatron.errors import NeoXArgsError
from megatron.model.layer_pattern import positional_parameter_count
from megatron.model.model_config import ModelConfig
from megatron.model.positional_embeddings import lookup
from megatron.model.sliced_loss import LOSS_SLICE

from .run_keys import PreflightRun

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # the repository (this file is megatron/run/preflight.py)
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
        self.fd = fd
        # Held now, so no other run is writing here: a crashed save's hidden folder is only ours to
        # remove, and on a full disk it may be what filled it.
        from megatron.checkpoint.checkpointing import remove_partial_saves, write_failure
        remove_partial_saves(self.path.parent)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"PID {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
        except OSError as err:
            self.release()
            err.filename = err.filename or str(self.path)
            cause, fix = write_failure(err)
            return f"save folder {self.path.parent}: {cause}. {fix}, then start the run again."
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


# ------------------------------------------------------------------------------------------ inputs
# What each entry point reads before its first step. "resume": `load` when it holds a checkpoint (a
# missing or empty folder starts training at step 0, as checkpointing.load_checkpoint does, unless
# `iteration` or `finetune` asks for one); "checkpoint": `load` must hold one.
READS = {
    "train.py": ("data", "tokenizer", "resume"),
    "evaluate.py": ("eval-data", "tokenizer", "checkpoint"),
    "generate.py": ("tokenizer", "checkpoint", "prompts"),
    "eval.py": ("tokenizer", "checkpoint"),
}
# The commands that create a missing input, by where the config expects it: the built-in corpus is the
# Makefile's `data` target; data/<name>/ is the dataset <name> of tools/datasets/prepare_data.py, and
# GPT-2's vocab and merges come with the paper's data (github).
PREPARE = "python tools/datasets/prepare_data.py"
MAKERS = (("data/stdlib/", "make data"), ("data/gpt2-", f"{PREPARE} github"), ("data/", PREPARE + " {name}"))
OWN_FILES = "tools/datasets/preprocess_data.py writes a .bin/.idx pair from JSON lines"


@dataclass
class Input:
    """One file (or a data prefix's .bin/.idx pair) a run reads, named by the config key that set it."""
    key: str            # dashed, as in the YAML
    path: str           # as the config gives it (a data prefix without its extension)
    files: tuple        # what is actually opened
    where: str          # "configs/x.yml:4", "command line"

    @property
    def missing(self) -> list[str]:
        return [f for f in self.files if not os.path.isfile(f)]

    def describe(self, maker: str | None = None) -> str:
        files = self.missing or self.files
        shown = f"{self.path}.bin and .idx" if len(files) == 2 else files[0]
        return f"{self.key} {shown} (set by {self.where}{f'; `{maker}` creates it' if maker else ''})"


def reads(script: str, run: PreflightRun) -> tuple[str, ...]:
    """What `script` reads (READS); nothing for a script this project does not know."""
    name = os.path.basename(script)
    if name == "train.py" and run.train_iters == 0:
        name = "evaluate.py"  # train.py then scores `load` as evaluate.py does
    return READS.get(name, ())


def inputs(run: PreflightRun, what: tuple[str, ...]) -> list[Input]:
    """The files of `what` (see READS) under this config; the checkpoint is `load_problem`'s."""
    found = []
    if "data" in what or "eval-data" in what:
        if run.data_path:
            keys = ["data_path"]
        elif "data" in what:
            keys = [f"{split}_data_paths" for split in ("train", "valid", "test")]
        else:
            keys = [f"{run.eval_split}_data_paths"]
        for key in keys:
            value = getattr(run, key)
            for prefix in [value] if isinstance(value, str) else value or []:
                found.append(Input(key.replace("_", "-"), prefix, (prefix + ".bin", prefix + ".idx"), run.source(key)))
    if "tokenizer" in what:
        from megatron.tokenizer.tokenizer import TOKENIZERS_WITHOUT_FILES
        # The files make_tokenizer opens: a vocabulary for every type with files, merges for GPT-2's BPE only.
        # One the type needs but the config leaves unset is make_tokenizer's own error (check_inputs).
        keys = () if run.tokenizer_type in TOKENIZERS_WITHOUT_FILES else \
            ("vocab_file", "merge_file") if run.tokenizer_type == "GPT2BPETokenizer" else ("vocab_file",)
        for key in keys:
            if getattr(run, key):
                path = getattr(run, key)
                found.append(Input(key.replace("_", "-"), path, (path,), run.source(key)))
    if "prompts" in what and run.text_gen_type == "input-file" and run.sample_input_file:
        found.append(Input("sample-input-file", run.sample_input_file, (run.sample_input_file,),
                           run.source("sample_input_file")))
    return found


def _maker(path: str) -> str | None:
    """The command that creates `path`, when it lies where this project's tools write."""
    path = os.path.normpath(path)
    for start, command in MAKERS:
        rest = path[len(start):]
        if path.startswith(start) and ("{name}" not in command or os.sep in rest):
            return command.format(name=rest.split(os.sep)[0])
    return None


def missing_inputs_problem(found: list[Input]) -> str | None:
    """One paragraph naming every missing input, where its key was set, and what creates it."""
    missing = [i for i in found if i.missing]
    if not missing:
        return None
    makers = {_maker(i.path) for i in missing}
    if len(makers) == 1 and None not in makers:
        listed = ", ".join(i.describe() for i in missing)
        how = f"`{makers.pop()}` creates {'it' if len(missing) == 1 else 'them'}; or point the keys at your own files."
    else:
        listed = ", ".join(i.describe(_maker(i.path)) for i in missing)
        how = f"Point {'the others' if makers - {None} else 'the keys'} at existing files ({OWN_FILES})."
    relative = any(not os.path.isabs(i.path) for i in missing) and os.getcwd() != REPO_ROOT
    where = f" (relative paths are read from {os.getcwd()})" if relative else ""
    return f"this run reads files that do not exist{where}: {listed}. {how}"


def load_problem(run: PreflightRun, what: tuple[str, ...]) -> str | None:
    """Why `load` cannot give the run what it needs (see READS), or None."""
    if "resume" not in what and "checkpoint" not in what:
        return None
    load, where = run.load, run.source("load")
    if not load:
        if "checkpoint" in what:
            return ("this run loads a checkpoint, but `load` is not set: set it to the `save` folder of a training "
                    "run (and `iteration` to pick a step other than the latest).")
        return None
    if os.path.exists(load) and not os.path.isdir(load):
        return (f"{where}: load {load} is a file, not a checkpoint folder. Point `load` at the `save` folder of a "
                "training run (the folder holding `latest` and global_stepN/).")
    if os.path.islink(load) and not os.path.exists(load):  # a loop or a dangling link: not a fresh start
        from megatron.checkpoint.folder import missing_why
        return f"{where}: load {load} {missing_why(load)}. Point `load` at the `save` folder of a training run."
    starts_fresh = "resume" in what and run.iteration is None and not run.finetune
    if starts_fresh and not (os.path.isdir(load) and os.listdir(load)):
        return None  # the first launch of a run whose `load` is its own `save`
    # Imported only now: it brings in DeepSpeed, which announces its accelerator on import.
    from megatron.checkpoint.checkpointing import CheckpointError, checkpoint_steps, resolve_tag
    if starts_fresh and not checkpoint_steps(load) and not os.path.exists(os.path.join(load, "latest")):
        return None  # the same, with other files in the folder (as checkpointing.load_checkpoint decides)
    try:
        resolve_tag(load, run.iteration)
    except CheckpointError as err:
        own = "checkpoint" in what and run.save and os.path.abspath(load) == os.path.abspath(run.save)
        hint = (" It is this config's own `save` folder: train first, `python deepy.py train.py` with the same "
                "configs.") if own and not checkpoint_steps(load) else ""
        return f"{where}: {err}{hint}"
    return None


def input_problems(run: PreflightRun, script: str) -> list[str]:
    """Every problem with what `script` reads, from the file system alone (fast: no file is opened)."""
    what = reads(script, run)
    return [missing_inputs_problem(inputs(run, what)), load_problem(run, what)]


def check_inputs(run: PreflightRun, script: str) -> list[Input]:
    """deepy.py's check before it launches: every input exists, and the tokenizer builds from its files
    (make_tokenizer's own errors), so a fresh clone is told what to create before any rank starts.
    Returns the files checked."""
    problems = [p for p in input_problems(run, script) if p]
    if problems:
        raise PreflightError(" ".join(problems))
    what = reads(script, run)
    if "tokenizer" in what:
        from megatron.tokenizer import make_tokenizer
        make_tokenizer(run.tokenizer_type, run.vocab_file, run.merge_file)
    return inputs(run, what)


# ------------------------------------------------------------------------------------------ memory
def parameter_count(config: ModelConfig) -> int:
    """Parameter count of the decoder `config` describes (biases and norms left out: a lower bound)."""
    h, layers = config.hidden_size, config.num_layers
    ffn = config.intermediate_size or 4 * h
    per_layer = 4 * h * h + 2 * h * ffn
    embeddings = config.padded_vocab_size * h * (2 if config.no_weight_tying else 1)
    if lookup(config.pos_emb).uses_max_positions:  # a table of max-position-embeddings rows (learned)
        embeddings += config.max_position_embeddings * h
    return layers * per_layer + embeddings + positional_parameter_count(config)


def run_parameter_count(model: ModelConfig, vocab_size: int) -> int:
    """parameter_count of a run's model (NeoXArgs.model, without its embedding rows) with `vocab_size` rows."""
    return parameter_count(dataclasses.replace(model, padded_vocab_size=vocab_size))


def memory_problem(run: PreflightRun, model: ModelConfig, training: bool, vocab_size: int) -> str | None:
    """A lower bound of the memory one rank needs, against what the device has free: only a run that
    certainly cannot fit is refused (the bound leaves out most activations, buffers and fragmentation).
    Training: fp32 weights, gradients and two Adam moments (16 bytes a parameter, ZeRO stages shard
    them, so they are divided by the ranks), one hidden state per layer and the logits of a micro-batch.
    Evaluation: fp32 weights and the logits of one forward at the longest length. The logits are those of
    one slice of LOSS_SLICE positions where the loss head is sliced (megatron/model/sliced_loss.py)."""
    model = dataclasses.replace(model, padded_vocab_size=vocab_size)
    params, positional = parameter_count(model), positional_parameter_count(model)
    if training:
        shards = run.world_size if run.zero_stage else 1
        state = 16 * params // shards
        micro, length = run.train_micro_batch_size_per_gpu, run.seq_length
        activations = 4 * (micro * length * model.hidden_size * model.num_layers
                           + _logit_rows(run, micro * length, training) * vocab_size)
        what = f"{params:,} parameters x 16 bytes (weights, gradients, Adam)"
    else:
        state = 4 * params
        micro, length = run.eval_micro_batch_size, max(run.eval_lengths)
        activations = 4 * (micro * length * model.hidden_size
                           + _logit_rows(run, micro * length, training) * vocab_size)
        what = f"{params:,} parameters x 4 bytes"
    available, kind = available_bytes()
    gib = 2 ** 30
    if training and state + activations <= available and (tables := random_positions_table_bytes(run, model)):
        if state + activations + tables > available:
            key, span = drawn_position_span(run)
            name = key.replace("_", "-")
            per_position = tables // span
            largest = (available - state - activations) // per_position
            return (f"{name} {span:,} ({run.source(key)}) cannot fit: a training step spans up to that many distances, "
                    f"and pos-emb {model.pos_emb} builds a per-distance table over them ({per_position} bytes a "
                    "distance: one float32 row per head "
                    f"and the distances themselves), {tables / gib:,.1f} GiB, with the model's {(state + activations) / gib:,.1f}"
                    f" GiB, but there are {available / gib:,.1f} GiB {kind}. The largest {name} that fits is "
                    f"{largest:,}" + (f" (the run's seq-length {run.seq_length} is its least)"
                                      if largest >= run.seq_length
                                      else f", below seq-length {run.seq_length}: turn {name} off (null)")
                    + "; or train a method without distance tables (rotary).")
    if state + activations <= available:
        return None
    return (f"this model cannot fit: it needs at least {(state + activations) / gib:,.1f} GiB ({what}: "
            f"{state / gib:,.1f} GiB; activations of {micro} sequence(s) of {length:,} tokens: "
            f"{activations / gib:,.1f} GiB), but there are {available / gib:,.1f} GiB {kind}"
            + (f"; {positional:,} of the parameters are the positional modules' (pos-emb {model.pos_emb}), so "
               "lower the positional method's sizes (e.g. cope-max-positions)" if positional > params // 2 else "")
            + ". Lower hidden-size, num-layers, the sequence length or the micro-batch size (config keys of this "
            "run).")


def random_positions_table_bytes(run: PreflightRun, model: ModelConfig) -> int:
    """Bytes of the per-distance table a training step with random-positions N (or PoSE's target N) builds, or 0:
    drawn positions span up to N, and a method with distance tables (KERPLE, ALiBi, T5, ...) builds its float32 table over every
    distance in the span, one row per head, from a float32 vector of the distances (a lower bound: one table,
    no gradient). Rotary and the other methods without tables allocate nothing per distance."""
    if drawn_position_span(run) is None:
        return 0
    from megatron.model.layer_pattern import layer_kinds
    from megatron.model.positional_embeddings.base import PositionalEmbedding

    def has_tables(name):
        method = lookup(name)
        return (method.distance_tables is not PositionalEmbedding.distance_tables
                or method.distance_tables_at is not PositionalEmbedding.distance_tables_at)
    if not any(has_tables(kind.pos_emb) for kind in layer_kinds(model)):
        return 0
    return 4 * (model.num_attention_heads + 1) * drawn_position_span(run)[1]


def drawn_position_span(run: PreflightRun) -> tuple[str, int] | None:
    """(key, N) of the training positions drawn from [0, N) (random-positions, pose-target-length), or None."""
    for key in ("random_positions", "pose_target_length"):
        if getattr(run, key) is not None:
            return key, getattr(run, key)
    return None


def _logit_rows(run: PreflightRun, tokens: int, training: bool) -> int:
    """Positions whose logits exist at once: one slice where `loss-head` slices (auto: on CPU, and whenever no
    gradient is taken), else all of them."""
    from deepspeed.accelerator import get_accelerator
    on_cpu = get_accelerator().device_name() == "cpu"
    head = run.loss_head
    if head == "sliced" or (head == "auto" and (on_cpu or not training)):
        return min(tokens, LOSS_SLICE)
    return tokens


def _precision_problem(run: PreflightRun) -> str | None:
    from deepspeed.accelerator import get_accelerator
    accelerator = get_accelerator()
    supported = {"fp16": accelerator.is_fp16_supported(), "bf16": accelerator.is_bf16_supported()}
    if run.precision in supported and not supported[run.precision]:
        where = run.sources.get("precision") or run.sources.get(run.precision)
        return (f"{where or 'the config'}: precision {run.precision} is not supported on this device "
                f"({accelerator.device_name()}). Use precision: fp32"
                + (" or bf16" if supported["bf16"] else "") + ", or run on a GPU.")
    return None


# ------------------------------------------------------------------------------------------ checks
def check_training(run: PreflightRun, model: ModelConfig, vocab_size: int) -> SaveFolderLock:
    """Raise a PreflightError (on every rank) for anything that would stop training later; returns the
    save folder's lock, held by rank 0 (release it when the run ends)."""
    problems = [_precision_problem(run), memory_problem(run, model, True, vocab_size),
                *input_problems(run, "train.py")]
    lock = SaveFolderLock(run.save if run.rank == 0 else None)
    if run.save:
        problems.append(folder_problem(run.save, "save", run.source("save")))
        if lock.path is not None and not problems[-1]:
            problems.append(lock.acquire())
    try:
        raise_together(problems)
    except PreflightError:
        lock.release()
        raise
    return lock


def check_evaluation(run: PreflightRun, model: ModelConfig, vocab_size: int) -> None:
    """Raise a PreflightError (on every rank) before a checkpoint is scored for nothing."""
    # `load` itself: evaluate_run, which calls this check, checks it first, and megatron.checkpoint.inference_model.load
    # names every way a checkpoint is missing.
    problems = [missing_inputs_problem(inputs(run, reads("evaluate.py", run))),
                memory_problem(run, model, False, vocab_size)]
    if run.rank == 0:  # only rank 0 writes the result file
        problems.append(folder_problem(run.eval_results_dir, "eval-results-dir",
                                       run.source("eval_results_dir")))
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
