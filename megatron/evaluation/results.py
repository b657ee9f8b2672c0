"""The result file: one JSON per evaluated run, read back by tools/analysis.

{
  "schema": "neox-eval/1",
  "run": {"name", "method", "pos_emb", "attention_window", "variant", "seed", "dataset", "train_length",
          "checkpoint", "checkpoint_step", "config_hash", "num_layers", "hidden_size",
          "num_attention_heads", "run_name", "label", "readable_label", "train_steps", "train_tokens"},
  "evaluation": {"split", "eval_seed", "eval_chunks", "eval_stride", "stream_tokens", "vocab_size",
                 "stream_sha256", "device", "dtype", "torch", "peak_memory", "created"},
  "results": [ one record per (length, mode):
      {"length", "mode", "loss", "ppl", "tokens", "chunks", "stderr", "chunk_starts", "chunk_losses",
       "seconds", "peak_memory_mb", "eval_chunks" (the eval-chunks it was scored with), and the mode's own fields (megatron/evaluation/modes/: "stride" for
       sliding, "position_loss" and "position_stderr" for position)}
    or {"length", "mode", "skipped": "why"} ]
}
`run.name` is the file's stem; `run.run_name` the run's human name (the run-name key, null without one),
`run.label` what tables and figures show (the name, else `readable_label`: the method and what it was trained
with, labels.py), `train_steps` and `train_tokens` its training budget.
`run.method` is the label of identity.Method (`kerple_log`, `kerple_log+window64`, `rotary+yarn8`) and `config_hash` is
identity.config_hash: the training config without seed, paths, logging and evaluation keys, so the
seeds of one configuration share it. `loss` is the mean per-token cross-entropy in nats, `ppl` = exp(loss); `stderr` is the standard error of
the mean over chunks (null with one chunk). `chunk_losses[i]` is the mean loss of the chunk starting at
stream offset `chunk_starts[i]`; equal starts and equal `stream_sha256` mean two runs are paired.
"""
import contextlib
import fcntl
import json
import math
import os
import pathlib
import tempfile

import numpy as np

from megatron.errors import NeoXArgsError

SCHEMA = "neox-eval/1"


class ResultFileError(NeoXArgsError):
    """A result file that is missing, unreadable or not in the schema above."""


def summarize(losses: np.ndarray, length: int, mode: str, starts: np.ndarray) -> dict:
    """The fields every mode's record shares, for a [chunks, L] per-token loss matrix (float64 sums
    for stable means)."""
    losses = losses.astype(np.float64)
    chunk_losses = losses.mean(axis=1)
    n = len(chunk_losses)
    loss = float(chunk_losses.mean())
    record = {
        "length": length, "mode": mode, "loss": loss, "ppl": _exp(loss), "tokens": int(losses.size),
        "chunks": n, "stderr": float(chunk_losses.std(ddof=1) / math.sqrt(n)) if n > 1 else None,
        "chunk_starts": [int(c) for c in starts], "chunk_losses": chunk_losses.tolist(),
    }
    return record


def _exp(loss: float) -> float:
    return math.exp(loss) if loss < 709.0 else math.inf


def write_atomic(path: pathlib.Path, document: dict) -> None:
    """Write JSON to a temporary file in the same folder and rename it: readers never see half a file."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(document, f, indent=1)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; a result file is as readable as any other
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


@contextlib.contextmanager
def folder_locked(folder):
    """Hold an exclusive flock on `folder` itself (no lock file is left behind): two evaluations writing
    result files there read, merge and write one at a time, so neither drops what the other wrote."""
    folder = pathlib.Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the flock


def _umask() -> int:
    mask = os.umask(0)  # the only way to read it is to set it
    os.umask(mask)
    return mask


_RUN_KEYS = ("name", "method", "pos_emb", "seed", "dataset", "train_length", "checkpoint_step")
_RECORD_KEYS = ("loss", "ppl", "tokens", "chunks", "stderr", "chunk_starts", "chunk_losses")


def load_result(path) -> dict:
    """Read and check one result file; errors name the file and what is wrong with it."""
    path = pathlib.Path(path)
    try:
        document = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ResultFileError(f"cannot read evaluation result {path}: {e}") from e

    def need(ok, what):
        if not ok:
            raise ResultFileError(
                f"{path} is not an evaluation result file of schema {SCHEMA}: {what}. "
                "Result files are written by evaluate.py; re-run it to regenerate this one.")

    need(isinstance(document, dict) and document.get("schema") == SCHEMA,
         f"schema is {document.get('schema') if isinstance(document, dict) else None!r}")
    for key in _RUN_KEYS:
        need(key in document.get("run", {}), f"run.{key} is missing")
    need(isinstance(document.get("results"), list), "results is not a list")
    for record in document["results"]:
        # Any mode name: a file may hold a mode whose module this process has not loaded.
        need(isinstance(record.get("mode"), str) and isinstance(record.get("length"), int),
             f"a record has mode {record.get('mode')!r} and length {record.get('length')!r}")
        if "skipped" not in record:
            missing = [k for k in _RECORD_KEYS if k not in record]
            need(not missing, f"the {record['mode']} record at length {record['length']} lacks {missing}")
            need(len(record["chunk_losses"]) == record["chunks"] == len(record["chunk_starts"]),
                 f"chunk counts disagree at length {record['length']} ({record['mode']})")
    document["path"] = str(path)
    return document


def load_results(directory) -> list[dict]:
    """Every result file (*.json) in a folder, sorted by name; an empty folder is an error."""
    directory = pathlib.Path(directory)
    if not directory.is_dir():
        raise ResultFileError(f"results folder {directory} does not exist; pass the eval-results-dir "
                              "that evaluate.py wrote to")
    documents = [load_result(p) for p in sorted(directory.glob("*.json"))]
    if not documents:
        raise ResultFileError(f"no result files (*.json) in {directory}; run evaluate.py first")
    return documents


def find_record(document: dict, length: int, mode: str) -> dict | None:
    for record in document["results"]:
        if record["length"] == length and record["mode"] == mode:
            return record
    return None
