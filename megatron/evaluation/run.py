"""Evaluate one trained run at several lengths and write its result file (what evaluate.py calls)."""
import datetime
import hashlib
import pathlib
import resource

import numpy as np
import torch

from megatron.checkpointing import read_client_state, resolve_tag
from megatron.data import build_evaluation_stream
from megatron.initialize import initialize_megatron
from megatron.inference_model import load
from megatron.launcher_watch import watch_launcher
from megatron.neox_arguments import NeoXArgsError
from megatron.preflight import check_evaluation, raise_together
from megatron.tokenizer import build_tokenizer
from .chunks import chunk_starts
from .context import ModeContext
from .identity import RunIdentity, config_hash, dataset_name, evaluation_variant
from .merge import earlier_records, merged
from .modes import get_mode
from .results import SCHEMA, ResultFileError, folder_locked, write_atomic


class EvaluationError(NeoXArgsError):
    """Evaluation cannot run as configured (missing checkpoint, bad eval keys, data too short)."""


def evaluate_run(neox_args) -> pathlib.Path:
    """Load the checkpoint named by `load`, score every (length, mode), write the JSON; return its path.

    Launched on several ranks (deepy.py), each rank scores every world_size-th chunk and rank 0
    gathers the losses and writes the file."""
    lengths, modes = _checked_plan(neox_args)
    if neox_args.world_size > 1:
        initialize_megatron(neox_args)
    say = print if neox_args.rank == 0 else (lambda *args, **kwargs: None)
    watch_launcher(say)
    tokenizer = build_tokenizer(neox_args)
    check_evaluation(neox_args, tokenizer.padded_vocab_size)  # results folder writable, model fits: before anything is scored
    stream = np.asarray(build_evaluation_stream(neox_args, neox_args.eval_split, tokenizer))
    plan = {length: _starts(stream, length, neox_args) for length in lengths}
    for mode in modes:  # a length a mode cannot score is found before any is scored (or the model loaded)
        if mode.check:
            mode.check(neox_args, tokenizer, stream, lengths)

    loaded = load(neox_args.load, neox_args)
    model, iteration = loaded.model, loaded.step
    device, dtype = next(model.parameters()).device, next(model.parameters()).dtype
    limit = min((pe.max_length for pe in model.positional_embeddings() if pe.max_length), default=None)

    run = run_record(neox_args, trained_config(neox_args), iteration)
    path = pathlib.Path(neox_args.eval_results_dir) / f"{run['name']}.json"
    evaluation = {
        "split": neox_args.eval_split, "eval_seed": neox_args.eval_seed,
        "eval_chunks": neox_args.eval_chunks, "eval_stride": neox_args.eval_stride,
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
    raise_together([problem])
    say(f"evaluating {run['name']} ({neox_args.load}, step {iteration}) on the {neox_args.eval_split} "
        f"split: {len(stream):,} tokens, lengths {lengths}, modes {[m.name for m in modes]}", flush=True)
    records = []
    with torch.inference_mode():  # no autograd: the model's `auto` attention takes its memory-light path
        for length in lengths:
            if limit is not None and length > limit:
                records += _skipped(neox_args, length, modes, limit, say)
                continue
            context = ModeContext(lambda x: model(x.to(device)), stream, plan[length], length, neox_args,
                                  tokenizer.vocab_size, network=model, tokenizer=tokenizer)
            records += [_scored(mode, context, device, say) for mode in modes]

    if neox_args.rank == 0:
        with folder_locked(path.parent):
            earlier = earlier_records(path, evaluation, run)  # again: another evaluation may have written it since
            records, kept = merged(earlier, records)
            evaluation["created"] = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            write_atomic(path, {"schema": SCHEMA, "run": run, "evaluation": evaluation, "results": records})
        say(f"wrote {path}" + (f" (kept the earlier results there for (length, mode) {kept}: same checkpoint, "
                               "scored the same way)" if kept else ""), flush=True)
    if neox_args.world_size > 1:
        torch.distributed.barrier()  # no rank returns before the file exists
    return path


def _checked_plan(neox_args):
    """What NeoXArgs does not check already (it checks eval-lengths, eval-modes, eval-stride and
    eval-chunks): that there is a checkpoint to evaluate."""
    lengths = list(neox_args.eval_lengths or [neox_args.seq_length])
    modes = [get_mode(name) for name in neox_args.eval_modes]
    if not neox_args.load:
        raise EvaluationError("`load` is not set: evaluation needs the checkpoint folder of a trained run "
                              "(the `save` folder of its training config)")
    if not pathlib.Path(neox_args.load).is_dir():
        problem = "is a file, not a folder" if pathlib.Path(neox_args.load).exists() else "does not exist"
        raise EvaluationError(f"checkpoint folder {neox_args.load} (key `load`) {problem}; point `load` "
                              "at the `save` folder of a finished training run")
    return lengths, modes


def _starts(stream, length, neox_args):
    try:
        return chunk_starts(len(stream), length, neox_args.eval_chunks, neox_args.eval_seed)
    except ValueError as e:
        raise EvaluationError(f"eval-lengths: at length {length}, {e} (eval-split "
                              f"{neox_args.eval_split!r})") from None


def _skipped(neox_args, length, modes, limit, say):
    message = (f"pos-emb {neox_args.pos_emb} embeds at most {limit} positions (max-position-embeddings), "
               f"so it cannot score length {length}; only relative methods evaluate beyond it")
    say(f"L={length}: skipped: {message}", flush=True)
    return [{"length": length, "mode": mode.name, "skipped": message} for mode in modes]


def _scored(mode, context, device, say) -> dict:
    """One (length, mode) record: the mode's fields, then when and how much it cost."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    context.mode, context.seconds = mode.name, 0.0
    record = {"length": context.length, "mode": mode.name, **mode.score(context)}
    record.update(seconds=round(context.seconds, 3), peak_memory_mb=_peak_memory_mb(device))
    stderr = f" ± {record['stderr']:.4f}" if record.get("stderr") is not None else ""
    say(f"L={context.length} {mode.name}: loss {record['loss']:.4f}{stderr}, ppl {record['ppl']:.3f}, "
        f"{record['chunks']} chunks, {record['tokens']:,} tokens, {context.seconds:.1f} s", flush=True)
    return record


def _peak_memory_mb(device) -> float:
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: kilobytes


def trained_config(neox_args) -> dict:
    """The config the checkpoint was trained with (stored in it by train.py): seed, train length and
    config hash come from here, not from the evaluating config, which may be launched differently."""
    return read_client_state(neox_args.load, resolve_tag(neox_args.load, neox_args.iteration))["neox_args"]


def run_record(neox_args, trained: dict, iteration: int) -> dict:
    """The result file's `run`: the identity (identity.py) and what else describes the checkpoint."""
    identity = RunIdentity(dataset_name(neox_args), neox_args.pos_emb, neox_args.attention_window,
                           trained["seed"], config_hash(trained), evaluation_variant(neox_args))
    return {
        "name": identity.file_stem(iteration),
        "method": identity.method, "pos_emb": identity.pos_emb, "attention_window": identity.window,
        "variant": identity.variant,
        "seed": identity.seed, "dataset": identity.dataset, "train_length": trained["seq_length"],
        "checkpoint": str(neox_args.load), "checkpoint_step": int(iteration), "config_hash": identity.config_hash,
        "num_layers": neox_args.num_layers, "hidden_size": neox_args.hidden_size,
        "num_attention_heads": neox_args.num_attention_heads,
    }
