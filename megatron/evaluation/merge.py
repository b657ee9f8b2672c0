"""A result file that already exists is never overwritten silently.

The file's name says which checkpoint was evaluated (identity.py), not which lengths and modes, so a
second evaluation of the same checkpoint — typically at more lengths — lands on the same file. When
both were scored the same way (same split, token stream, chunk seed, stride, dtype), the records merge:
the earlier (length, mode, eval-chunks) records the new evaluation does not redo are kept, the ones it
redoes (eval-force) are replaced, and what it need not redo is skipped before scoring (`already_scored`).
Each record carries the eval-chunks it was scored with, so another chunk count is another record in the
same file. Otherwise the evaluation stops before scoring anything and says what differs; so it does when the
run's run-name already names another run in the folder (`name_taken`). evaluate.py's driver asks here what is held
(`held_or_refused`), what is left to score (`modes_to_score`), and writes its records (`write_results`).
"""
import datetime
import json
import pathlib
from typing import Callable

from megatron.output_paths import reported_write
from megatron.quoting import quote
from megatron.run.preflight import raise_together
from .results import SCHEMA, ResultFileError, folder_locked, load_result, write_atomic
from .settings import EvaluationSettings

# `run` fields that say which checkpoint was evaluated; results of different checkpoints never mix.
CHECKPOINT_FIELDS = ("checkpoint_step", "config_hash", "method", "seed", "dataset")

# `evaluation` fields that decide what a record means; records scored under different values do not mix.
SAME_SETTINGS = ("split", "eval_seed", "eval_stride", "stream_tokens", "stream_sha256",
                 "vocab_size", "dtype")


def earlier_records(path: pathlib.Path, evaluation: dict, run: dict) -> list[dict]:
    """The records of an existing result file at `path` that a new evaluation (its `evaluation` block
    and `run`) may merge with; [] when there is none. Raises ResultFileError when the file cannot be
    merged, before anything is scored."""
    if not path.exists():
        return []
    keep_it = (f"It is never overwritten: evaluate into another eval-results-dir, or move {path.name} away "
               "first if it is no longer wanted.")
    try:
        document = load_result(path)
    except ResultFileError as err:
        raise ResultFileError(f"{err} {keep_it}") from None
    differ = differences(document, run, evaluation, CHECKPOINT_FIELDS, SAME_SETTINGS)
    if differ:
        raise ResultFileError(f"{path} already holds results of this checkpoint, scored differently ("
                              + "; ".join(differ) + f"), so the new results cannot be merged into it. {keep_it}")
    for record in document["results"]:  # written before records carried it: the file's one setting
        record.setdefault("eval_chunks", document["evaluation"].get("eval_chunks"))
    return document["results"]


def differences(document: dict, run: dict, evaluation: dict, checkpoint_fields, settings) -> list[str]:
    """`key: earlier X, now Y` for each checkpoint field of `run` and each setting of `evaluation` in
    which an existing result document differs from a new evaluation (any result file's schema)."""
    differ = [f"{key}: earlier {document['run'].get(key)!r}, now {run.get(key)!r}"
              for key in checkpoint_fields if document["run"].get(key) != run.get(key)]
    return differ + [f"{key}: earlier {document['evaluation'].get(key)!r}, now {evaluation.get(key)!r}"
                     for key in settings if document["evaluation"].get(key) != evaluation.get(key)]


def merged(earlier: list[dict], new: list[dict]) -> tuple[list[dict], list[tuple[int, str]]]:
    """(records sorted by length, mode and eval-chunks, the earlier (length, mode) pairs kept)."""
    redone = {_key(r) for r in new}
    kept = [r for r in earlier if _key(r) not in redone]
    if not kept:
        return new, []
    records = sorted(kept + new, key=lambda r: (r["length"], r["mode"], r.get("eval_chunks") or 0))
    return records, [(r["length"], r["mode"]) for r in kept]


def _key(record: dict) -> tuple:
    return record["length"], record["mode"], record.get("eval_chunks")


def already_scored(earlier: list[dict], eval_chunks: int | None) -> set[tuple[int, str]]:
    """The (length, mode) pairs an existing result file already holds at this eval-chunks (scored, or
    skipped because the method cannot score the length): an evaluation skips them unless eval-force."""
    return {(r["length"], r["mode"]) for r in earlier if r.get("eval_chunks") == eval_chunks}


def write_merged(path: pathlib.Path, merge: Callable[[], tuple[dict, list]], what: str) -> list:
    """Write the document `merge()` returns (merging with the file as it is now) to `path` under the folder's
    lock, and return what `merge` kept of the earlier file: how both evaluation drivers (evaluate.py and
    eval.py) end. `merge` reads the file again inside the lock, since another evaluation may have written it
    since it was first read; `what` names the results in the message of a write that fails."""
    with folder_locked(path.parent):
        document, kept = merge()
        with reported_write(path, what, "eval-results-dir"):
            write_atomic(path, document)
    return kept


def held_or_refused(settings: EvaluationSettings, path, evaluation, run) -> set:
    """The (length, mode) pairs the result file already holds (held_records); an existing file this
    evaluation cannot merge with, or a run-name another run holds there, is refused on every rank before
    anything is scored."""
    earlier, problem = [], None
    if settings.rank == 0:
        try:
            earlier = earlier_records(path, evaluation, run)
        except ResultFileError as err:
            problem = str(err)
        problem = problem or name_taken(path.parent, run)
    raise_together([problem])
    return held_records(settings, path, evaluation, run, earlier)


def held_records(settings: EvaluationSettings, path, evaluation, run, earlier) -> set:
    """The (length, mode) pairs the result file already holds for this checkpoint and these settings
    (none with eval-force). Every rank reads the file, so all skip the same lengths."""
    if settings.force:
        return set()
    if settings.rank != 0:
        earlier = earlier_records(path, evaluation, run)  # rank 0 found it mergeable (raise_together)
    return already_scored(earlier, settings.chunks)


def name_taken(folder, run: dict) -> str | None:
    """The problem when another run (another config hash) already has result files under this run's
    run-name in `folder`: a name labels one run in every table, so the second is refused before scoring."""
    if not run.get("run_name"):
        return None
    for path in sorted(pathlib.Path(folder).glob("*.json")):
        try:
            other = json.loads(path.read_text()).get("run", {})
        except (OSError, ValueError, AttributeError):
            continue  # not a result file this check can read; the tables say what is wrong with it
        if other.get("run_name") == run["run_name"] and other.get("config_hash") != run["config_hash"]:
            return (f"run-name {quote(run['run_name'])} already names another run in {folder}: {path.name} "
                    f"(config hash {str(other.get('config_hash'))[:8]}, this run's {run['config_hash'][:8]}). A name "
                    "labels one run in every table and figure: train this run under another run-name, or evaluate "
                    "it into another eval-results-dir and tell the two apart there with --rename.")
    return None


def modes_to_score(modes, length, held, path, say) -> list:
    """The modes still to score at `length`; one line names those skipped."""
    done = [mode.name for mode in modes if (length, mode.name) in held]
    if done:
        say(f"L={length}: {', '.join(done)} already in {path.name} (same checkpoint and settings): skipped; "
            "--force scores again", flush=True)
    return [mode for mode in modes if (length, mode.name) not in held]


def write_results(path, evaluation, run, records, say) -> bool:
    """Rank 0: merge the new records, each with the eval-chunks it was scored with (`evaluation`'s), into the file
    (read again under its lock) and write it; False when there was nothing new to write."""
    for record in records:  # another chunk count is another record of the same file
        record["eval_chunks"] = evaluation["eval_chunks"]
    if not records:
        say(f"nothing new to score: {path} holds every length and mode asked for", flush=True)
        return False

    def merge():
        document_records, kept = merged(earlier_records(path, evaluation, run), records)
        evaluation["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        return {"schema": SCHEMA, "run": run, "evaluation": evaluation, "results": document_records}, kept
    kept = write_merged(path, merge, "the results (printed above)")
    say(f"wrote {path}" + (f" (kept the {len(kept)} earlier records there it did not score again: same "
                           "checkpoint, scored the same way)" if kept else ""), flush=True)
    return True
