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
from megatron.evaluation.merge import already_scored, earlier_records, merged
from megatron.evaluation.results import SCHEMA, ResultFileError, folder_locked, write_atomic
from megatron.evaluation.run import (EvaluationError, checked_plan, name_taken, open_run, planned_starts,
                                     scored_record, skipped_records)
from megatron.evaluation.dashboards import log_evaluation
from megatron.checkpoint.inference_model import load
from megatron.run.initialize import initialize_megatron
from megatron.run.launcher_watch import watch_launcher
from megatron.model.sequence_parallel import SequenceParallel
from megatron.output_paths import reported_write
from megatron.parallel import SequenceParallelGroups
from megatron.parallel.sequence_scoring import SequenceParallelScorer
from megatron.run.preflight import check_evaluation, raise_together
from megatron.tokenizer import build_tokenizer


def evaluate_run(neox_args) -> pathlib.Path:
    """Load the checkpoint named by `load`, score every (length, mode), write the JSON; return its path.

    Launched on several ranks (deepy.py), each rank scores every world_size-th chunk and rank 0
    gathers the losses and writes the file."""
    lengths, modes = checked_plan(neox_args)
    if neox_args.world_size > 1:
        initialize_megatron(neox_args)
    say = print if neox_args.rank == 0 else (lambda *args, **kwargs: None)
    watch_launcher(say)
    tokenizer = build_tokenizer(neox_args)
    check_evaluation(neox_args, tokenizer.padded_vocab_size)  # results folder writable, model fits: before anything is scored
    stream = _evaluation_stream(neox_args, tokenizer)
    plan = {length: planned_starts(stream, length, neox_args, tokenizer.eod) for length in lengths}
    for mode in modes:  # a length a mode cannot score is found before any is scored (or the model loaded)
        if mode.check:
            mode.check(neox_args, tokenizer, stream, lengths)

    opened, run = open_run(neox_args)
    loaded = load(opened, neox_args.inference_run())
    model, iteration = loaded.model, loaded.step
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    def scorer(x, labels=None, vocab_size=None):  # logits, or with labels their losses (the head by slices)
        labels = None if labels is None else labels.to(device)
        return model(x.to(device), labels=labels, vocab_size=vocab_size)
    if neox_args.sequence_parallel_size > 1:  # each window split over the ranks of a replica (megatron/parallel)
        refused = [mode.name for mode in modes if not mode.splits_sequences]
        if refused:
            raise EvaluationError(
                f"sequence-parallel-size {neox_args.sequence_parallel_size} splits every scored window over ranks, "
                f"but eval-modes {refused} run the whole model on prompts of their own, which it does not split. "
                "Score those modes with sequence-parallel-size 1, or leave them out of eval-modes here.")
        groups = SequenceParallelGroups(neox_args.sequence_parallel_size)
        model.sequence_parallel = SequenceParallel(groups.sequence_group)
        scorer = SequenceParallelScorer(model, device)
    limit = model.position_limit()
    check_position_range(model, lengths, dtype)

    path = pathlib.Path(neox_args.eval_results_dir) / f"{run['name']}.json"
    evaluation = {
        "split": neox_args.eval_split, "eval_seed": neox_args.eval_seed,
        "eval_chunks": neox_args.eval_chunks, "eval_stride": neox_args.eval_stride,
        "eval_documents": neox_args.eval_documents,
        "stream_tokens": int(len(stream)), "vocab_size": tokenizer.vocab_size,
        "stream_sha256": hashlib.sha256(stream.astype(np.int64).tobytes()).hexdigest(),
        "device": str(device), "dtype": str(dtype).removeprefix("torch."), "ranks": neox_args.world_size,
        "torch": torch.__version__,
        "peak_memory": "cuda max allocated per length" if device.type == "cuda" else "process peak RSS so far",
    }
    earlier, problem = [], None
    if neox_args.rank == 0:  # an existing file this one cannot merge with: refuse before scoring
        try:
            earlier = earlier_records(path, evaluation, run)
        except ResultFileError as err:
            problem = str(err)
        problem = problem or name_taken(path.parent, run)
    raise_together([problem])
    held = held_records(neox_args, path, evaluation, run, earlier)
    say(f"evaluating {run['name']} ({neox_args.load}, step {iteration}) on the {neox_args.eval_split} "
        f"split: {len(stream):,} tokens, lengths {lengths}, modes {[m.name for m in modes]}", flush=True)
    records = []
    with torch.inference_mode():  # no autograd: the model's `auto` attention takes its memory-light path
        for length in lengths:
            todo = modes_to_score(modes, length, held, path, say)
            if not todo:
                continue
            if limit is not None and length > limit:
                records += skipped_records(neox_args, length, todo, limit, say)
                continue
            context = ModeContext(scorer, stream, plan[length], length, neox_args,
                                  tokenizer.vocab_size, network=model, tokenizer=tokenizer)
            records += [scored_record(mode, context, device, say) for mode in todo]
    for record in records:  # another chunk count is another record of the same file (merge.py)
        record["eval_chunks"] = neox_args.eval_chunks

    if neox_args.rank == 0 and not records:
        say(f"nothing new to score: {path} holds every length and mode asked for", flush=True)
    elif neox_args.rank == 0:
        scored_now = records
        with folder_locked(path.parent):
            earlier = earlier_records(path, evaluation, run)  # again: another evaluation may have written it since
            records, kept = merged(earlier, records)
            evaluation["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            with reported_write(path, "the results (printed above)", "eval-results-dir"):
                write_atomic(path, {"schema": SCHEMA, "run": run, "evaluation": evaluation, "results": records})
        say(f"wrote {path}" + (f" (kept the {len(kept)} earlier records there it did not score again: same "
                               "checkpoint, scored the same way)" if kept else ""), flush=True)
        logged = log_evaluation(neox_args, scored_now)  # after the file: a logging failure loses no result
        if logged:
            say(f"logged perplexity against length to {' and '.join(logged)}", flush=True)
    if neox_args.world_size > 1:
        torch.distributed.barrier()  # no rank returns before the file exists
    return path


def _evaluation_stream(neox_args, tokenizer) -> np.ndarray:
    """The eval split's tokens; where no data is set and the model came from a checkpoint that keeps only
    its model (no resolved_config.yml), the error says why the checkpoint could not give the data."""
    try:
        return np.asarray(build_evaluation_stream(neox_args, neox_args.eval_split, tokenizer))
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


def held_records(neox_args, path, evaluation, run, earlier) -> set:
    """The (length, mode) pairs the result file already holds for this checkpoint and these settings
    (none with eval-force). Every rank reads the file, so all skip the same lengths."""
    if neox_args.eval_force:
        return set()
    if neox_args.rank != 0:
        earlier = earlier_records(path, evaluation, run)  # rank 0 found it mergeable (raise_together)
    return already_scored(earlier, neox_args.eval_chunks)


def modes_to_score(modes, length, held, path, say) -> list:
    """The modes still to score at `length`; one line names those skipped."""
    done = [mode.name for mode in modes if (length, mode.name) in held]
    if done:
        say(f"L={length}: {', '.join(done)} already in {path.name} (same checkpoint and settings): skipped; "
            "--force scores again", flush=True)
    return [mode for mode in modes if (length, mode.name) not in held]
