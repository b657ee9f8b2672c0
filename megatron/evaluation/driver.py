"""Evaluate one trained run at several lengths and write its result file (what evaluate.py calls, and
train.py with `train-iters: 0`).

It reads the evaluation stream from megatron/data; the data package imports only the probes' generators
(megatron/probes, a leaf), never this package, so the driver lives with the rest of evaluation."""
import datetime
import hashlib
import pathlib

import numpy as np
import torch

from megatron.data import DataError, build_evaluation_stream
from megatron.evaluation.context import ModeContext
from megatron.evaluation.merge import already_scored, earlier_records, merged, write_merged
from megatron.evaluation.results import SCHEMA, ResultFileError
from megatron.evaluation.run import (EvaluationError, checked_plan, name_taken, open_run, planned_starts,
                                     scored_record, skipped_records)
from megatron.evaluation.dashboards import log_evaluation
from megatron.evaluation.settings import EvaluationSettings
from megatron.checkpoint.inference_model import load
from megatron.run.initialize import initialize_megatron
from megatron.run.launcher_watch import watch_launcher
from megatron.model.sequence_parallel import SequenceParallel
from megatron.parallel import SequenceParallelGroups
from megatron.parallel.sequence_scoring import SequenceParallelScorer
from megatron.run.preflight import check_evaluation, raise_together
from megatron.tokenizer import build_tokenizer


def evaluate_run(neox_args) -> pathlib.Path:
    """Load the checkpoint named by `load`, score every (length, mode), write the JSON; return its path.

    Launched on several ranks (deepy.py), each rank scores every world_size-th chunk and rank 0
    gathers the losses and writes the file. Everything that can be refused is refused before the first
    length is scored: the plan, the data, the modes, the model's positions and the result file."""
    settings = EvaluationSettings.of(neox_args)  # what the evaluation keys ask; below, only start-up reads the config
    lengths, modes = checked_plan(settings)
    if settings.world_size > 1:
        initialize_megatron(neox_args)
    say = print if settings.rank == 0 else (lambda *args, **kwargs: None)
    watch_launcher(say)
    tokenizer = build_tokenizer(neox_args)
    check_evaluation(neox_args, tokenizer.padded_vocab_size)  # results folder writable, model fits: before anything is scored
    stream = _evaluation_stream(neox_args, tokenizer)
    plan = {length: planned_starts(stream, length, settings, tokenizer.eod) for length in lengths}
    for mode in modes:  # a length a mode cannot score is found before any is scored (or the model loaded)
        if mode.check:
            mode.check(settings, tokenizer, stream, lengths)

    opened, run = open_run(neox_args)
    loaded = load(opened, neox_args.inference_run())
    model, scorer = loaded.model, _scorer(loaded.model, modes, settings.sequence_parallel_size)
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    check_position_range(model, lengths, dtype)
    path = pathlib.Path(settings.results_dir) / f"{run['name']}.json"
    evaluation = _evaluation_record(settings, stream, tokenizer, device, dtype)
    held = _held_or_refused(settings, path, evaluation, run)
    say(f"evaluating {run['name']} ({settings.load}, step {loaded.step}) on the {settings.split} "
        f"split: {len(stream):,} tokens, lengths {lengths}, modes {[m.name for m in modes]}", flush=True)

    records = []
    with torch.inference_mode():  # no autograd: the model's `auto` attention takes its memory-light path
        for length in lengths:
            todo = modes_to_score(modes, length, held, path, say)
            if todo and (limit := model.position_limit()) is not None and length > limit:
                records += skipped_records(model.config.pos_emb, length, todo, limit, say)
            elif todo:
                context = ModeContext(scorer, stream, plan[length], length, settings,
                                      tokenizer.vocab_size, network=model, tokenizer=tokenizer)
                records += [scored_record(mode, context, device, say) for mode in todo]
    for record in records:  # another chunk count is another record of the same file (merge.py)
        record["eval_chunks"] = settings.chunks
    if settings.rank == 0 and _write_results(path, evaluation, run, records, say):
        logged = log_evaluation(neox_args, records)  # after the file: a logging failure loses no result
        if logged:
            say(f"logged perplexity against length to {' and '.join(logged)}", flush=True)
    if settings.world_size > 1:
        torch.distributed.barrier()  # no rank returns before the file exists
    return path


def _scorer(model, modes, sequence_parallel_size: int):
    """What scores a window: the model itself (logits, or with labels their losses, the head by slices), or
    with sequence-parallel-size > 1 each window split over the ranks of a replica (megatron/parallel)."""
    device = next(model.parameters()).device
    if sequence_parallel_size <= 1:
        def scorer(x, labels=None, vocab_size=None):
            labels = None if labels is None else labels.to(device)
            return model(x.to(device), labels=labels, vocab_size=vocab_size)
        return scorer
    refused = [mode.name for mode in modes if not mode.splits_sequences]
    if refused:
        raise EvaluationError(
            f"sequence-parallel-size {sequence_parallel_size} splits every scored window over ranks, "
            f"but eval-modes {refused} run the whole model on prompts of their own, which it does not split. "
            "Score those modes with sequence-parallel-size 1, or leave them out of eval-modes here.")
    groups = SequenceParallelGroups(sequence_parallel_size)
    model.sequence_parallel = SequenceParallel(groups.sequence_group)
    return SequenceParallelScorer(model, device)


def _evaluation_record(settings: EvaluationSettings, stream, tokenizer, device, dtype) -> dict:
    """The result file's `evaluation`: how the records were scored (merge.py's SAME_SETTINGS among them)."""
    return {
        "split": settings.split, "eval_seed": settings.seed,
        "eval_chunks": settings.chunks, "eval_stride": settings.stride,
        "eval_documents": settings.documents,
        "stream_tokens": int(len(stream)), "vocab_size": tokenizer.vocab_size,
        "stream_sha256": hashlib.sha256(stream.astype(np.int64).tobytes()).hexdigest(),
        "device": str(device), "dtype": str(dtype).removeprefix("torch."), "ranks": settings.world_size,
        "torch": torch.__version__,
        "peak_memory": "cuda max allocated per length" if device.type == "cuda" else "process peak RSS so far",
    }


def _held_or_refused(settings: EvaluationSettings, path, evaluation, run) -> set:
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


def _write_results(path, evaluation, run, records, say) -> bool:
    """Rank 0: merge the new records into the file (read again under its lock) and write it; False when there
    was nothing new to write."""
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


def _evaluation_stream(neox_args, tokenizer) -> np.ndarray:
    """The eval split's tokens; where no data is set and the model came from a checkpoint that keeps only
    its model (no resolved_config.yml), the error says why the checkpoint could not give the data."""
    try:
        return np.asarray(build_evaluation_stream(neox_args.data_run(), neox_args.eval_split, tokenizer))
    except DataError as err:
        folder = neox_args.model_only_from()
        if folder is None or neox_args.data_path:
            raise
        raise DataError(f"{err} The model came from {folder}, which keeps no resolved_config.yml (written before "
                        "checkpoints kept their config): its model-states file records the model, not the run's "
                        "data. Give the data the run was trained on, e.g. --set data-path=PREFIX (and its split), "
                        "or the run's own config files.") from None


def check_position_range(model, lengths, dtype) -> None:
    """Every length's positions fit what each positional module can compute in `dtype` (xpos's decay
    factors overflow past a position), found before any length is scored: not after the first lengths'
    work, with no result file."""
    for module in model.positional_embeddings():
        if hasattr(module, "max_position"):
            fits = module.max_position(dtype) + 1
            too_long = [length for length in lengths if length > fits]
            if too_long:
                raise EvaluationError(f"eval-lengths: {too_long} need positions past {fits - 1}, the largest "
                                      f"{type(module).__name__} computes in {str(dtype).removeprefix('torch.')} "
                                      "(its scale factors overflow there); nothing was scored. Evaluate at lengths up "
                                      f"to {fits}, or train with a larger scale base (xpos-scale-base).")


def held_records(settings: EvaluationSettings, path, evaluation, run, earlier) -> set:
    """The (length, mode) pairs the result file already holds for this checkpoint and these settings
    (none with eval-force). Every rank reads the file, so all skip the same lengths."""
    if settings.force:
        return set()
    if settings.rank != 0:
        earlier = earlier_records(path, evaluation, run)  # rank 0 found it mergeable (raise_together)
    return already_scored(earlier, settings.chunks)


def modes_to_score(modes, length, held, path, say) -> list:
    """The modes still to score at `length`; one line names those skipped."""
    done = [mode.name for mode in modes if (length, mode.name) in held]
    if done:
        say(f"L={length}: {', '.join(done)} already in {path.name} (same checkpoint and settings): skipped; "
            "--force scores again", flush=True)
    return [mode for mode in modes if (length, mode.name) not in held]
