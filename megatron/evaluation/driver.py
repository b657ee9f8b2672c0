"""Evaluate one trained run at several lengths and write its result file (what evaluate.py calls, and
train.py with `train-iters: 0`).

It takes the typed records the config package builds (run_keys.py), its start's among them: the ranks' seed, the
start-up checks' keys (megatron/run/preflight.py) and the evaluated data's (megatron/data)."""
import hashlib
import pathlib

import numpy as np
import torch

from megatron.evaluation.context import ModeContext
from megatron.evaluation.merge import held_or_refused, modes_to_score, write_results
from megatron.evaluation.run import (EvaluationError, checked_plan, evaluation_stream, open_run, planned_starts,
                                     scored_record, skipped_records)
from megatron.evaluation.dashboards import log_evaluation
from megatron.evaluation.run_keys import EvaluationRun
from megatron.evaluation.settings import EvaluationSettings
from megatron.checkpoint.inference_model import load, run_tokenizer
from megatron.model.sequence_parallel import SequenceParallel
from megatron.parallel import SequenceParallelGroups
from megatron.parallel.sequence_scoring import SequenceParallelScorer
from megatron.run.initialize import join_process_group
from megatron.run.launcher_watch import watch_launcher
from megatron.run.preflight import check_evaluation


def evaluate_run(evaluation: EvaluationRun) -> pathlib.Path:
    """Load the checkpoint named by `load`, score every (length, mode), write the JSON; return its path.

    Launched on several ranks (deepy.py), each rank scores every world_size-th chunk and rank 0
    gathers the losses and writes the file. Everything that can be refused is refused before the first
    length is scored: the plan, the data, the modes, the model's positions and the result file.
    `evaluation`: what the run's config asks (`NeoXArgs.evaluation_run()`, megatron/neox_arguments/to_evaluation.py)."""
    settings = evaluation.settings
    lengths, modes = checked_plan(settings)
    say = print if settings.rank == 0 else (lambda *args, **kwargs: None)
    if settings.world_size > 1:
        join_process_group(evaluation.start.seed)
    watch_launcher(say)
    tokenizer = run_tokenizer(evaluation.inference)
    check_evaluation(evaluation.start.preflight, evaluation.inference.model, tokenizer.padded_vocab_size)
    stream = evaluation_stream(evaluation.start, settings.split, tokenizer)
    plan = {length: planned_starts(stream, length, settings, tokenizer.eod) for length in lengths}
    for mode in modes:  # a length a mode cannot score is found before any is scored (or the model loaded)
        if mode.check:
            mode.check(settings, tokenizer, stream, lengths)

    opened, run = open_run(settings, evaluation.evaluated)
    loaded = load(opened, evaluation.inference)
    model, scorer = loaded.model, _scorer(loaded.model, modes, settings.sequence_parallel_size)
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    check_position_range(model, lengths, dtype)
    path = pathlib.Path(settings.results_dir) / f"{run['name']}.json"
    scoring = _evaluation_record(settings, stream, tokenizer, device, dtype)
    held = held_or_refused(settings, path, scoring, run)
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
    if settings.rank == 0 and write_results(path, scoring, run, records, say):
        if logged := log_evaluation(evaluation.dashboards, records):  # after the file: a logging failure loses none
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
