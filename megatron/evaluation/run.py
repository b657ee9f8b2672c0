"""Evaluate one trained run at several lengths and write its result file (what evaluate.py calls)."""
import dataclasses
import datetime
import hashlib
import json
import pathlib
import resource
import time

import numpy as np
import torch
from tqdm import tqdm

from megatron.checkpointing import load_model_weights, read_client_state, resolve_tag
from megatron.data import build_evaluation_stream
from megatron.initialize import initialize_megatron
from megatron.model import GPTModel
from megatron.neox_arguments import NeoXArgsError, groups
from megatron.tokenizer import build_tokenizer
from .chunks import chunk_starts
from .results import SCHEMA, summarize, write_atomic
from .scoring import nonoverlap_losses, sliding_losses


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
    tokenizer = build_tokenizer(neox_args)
    stream = np.asarray(build_evaluation_stream(neox_args, neox_args.eval_split, tokenizer))
    plan = {length: _starts(stream, length, neox_args) for length in lengths}

    device = torch.device(f"cuda:{neox_args.local_rank}" if torch.cuda.is_available() else "cpu")
    # bf16/fp16 only where the hardware runs them fast; CPU evaluates in fp32.
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(neox_args.precision, torch.float32)
    dtype = dtype if device.type == "cuda" else torch.float32
    model = GPTModel(neox_args, tokenizer.padded_vocab_size)
    iteration = load_model_weights(neox_args, model)
    model.to(device=device, dtype=dtype).eval()
    limit = min((pe.max_length for pe in model.positional_embeddings() if pe.max_length), default=None)

    run = run_identity(neox_args, trained_config(neox_args), iteration)
    say(f"evaluating {run['name']} ({neox_args.load}, step {iteration}) on the {neox_args.eval_split} "
        f"split: {len(stream):,} tokens, lengths {lengths}, modes {modes}", flush=True)
    records = []
    with torch.inference_mode():  # no autograd: the model's `auto` attention takes its memory-light path
        for length in lengths:
            if limit is not None and length > limit:
                records += _skipped(neox_args, length, modes, limit, say)
                continue
            records += _evaluate_length(lambda x: model(x.to(device)), stream, plan[length], length,
                                        modes, neox_args, device, tokenizer.vocab_size, say)

    path = pathlib.Path(neox_args.eval_results_dir) / f"{run['name']}.json"
    if neox_args.rank == 0:
        write_atomic(path, {
            "schema": SCHEMA, "run": run,
            "evaluation": {
                "split": neox_args.eval_split, "eval_seed": neox_args.eval_seed,
                "eval_chunks": neox_args.eval_chunks, "eval_stride": neox_args.eval_stride,
                "stream_tokens": int(len(stream)), "vocab_size": tokenizer.vocab_size,
                "stream_sha256": hashlib.sha256(stream.astype(np.int64).tobytes()).hexdigest(),
                "device": str(device), "dtype": str(dtype).removeprefix("torch."), "ranks": neox_args.world_size,
                "torch": torch.__version__,
                "peak_memory": ("cuda max allocated per length" if device.type == "cuda"
                                else "process peak RSS so far"),
                "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            },
            "results": records,
        })
        say(f"wrote {path}", flush=True)
    if neox_args.world_size > 1:
        torch.distributed.barrier()  # no rank returns before the file exists
    return path


def _checked_plan(neox_args):
    """What NeoXArgs does not check already (it checks eval-lengths, eval-modes, eval-stride and
    eval-chunks): that there is a checkpoint to evaluate."""
    lengths, modes = list(neox_args.eval_lengths or [neox_args.seq_length]), list(neox_args.eval_modes)
    if not neox_args.load:
        raise EvaluationError("`load` is not set: evaluation needs the checkpoint folder of a trained run "
                              "(the `save` folder of its training config)")
    if not pathlib.Path(neox_args.load).is_dir():
        raise EvaluationError(f"checkpoint folder {neox_args.load} (key `load`) does not exist; point `load` "
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
    return [{"length": length, "mode": mode, "skipped": message} for mode in modes]


def _evaluate_length(model, stream, starts, length, modes, neox_args, device, vocab_size, say):
    """Records for one length; nonoverlap and position share one pass over the chunks."""
    batch = neox_args.eval_micro_batch_size
    stride = min(neox_args.eval_stride or max(length // 2, 1), length)
    mine = starts[neox_args.rank::neox_args.world_size]  # this rank's share of the chunks
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    passes = {}
    if {"nonoverlap", "position"} & set(modes):
        passes["nonoverlap"] = lambda progress: nonoverlap_losses(
            model, stream, mine, length, batch, progress, vocab_size)
    if "sliding" in modes:
        passes["sliding"] = lambda progress: sliding_losses(
            model, stream, mine, length, stride, batch, progress, vocab_size)

    records = []
    for name, score in passes.items():
        began = time.perf_counter()
        with _progress_bar(f"L={length} {name}", len(mine), neox_args.rank == 0) as progress:
            losses = _gathered(score(progress), neox_args.world_size)
        seconds = time.perf_counter() - began
        for mode in [m for m in modes if m == name or (name == "nonoverlap" and m == "position")]:
            record = summarize(losses, length, mode, starts)
            record.update(seconds=round(seconds, 3), peak_memory_mb=_peak_memory_mb(device))
            if mode == "sliding":
                record["stride"] = stride
            stderr = f" ± {record['stderr']:.4f}" if record["stderr"] is not None else ""
            say(f"L={length} {mode}: loss {record['loss']:.4f}{stderr}, ppl {record['ppl']:.3f}, "
                f"{record['chunks']} chunks, {record['tokens']:,} tokens, {seconds:.1f} s", flush=True)
            records.append(record)
    return records


def _gathered(losses: np.ndarray, world_size: int) -> np.ndarray:
    """Every rank's [its chunks, L] losses back in chunk order (rank r scored chunks r, r + world, ...)."""
    if world_size == 1:
        return losses
    parts = [None] * world_size
    torch.distributed.all_gather_object(parts, losses)
    out = np.empty((sum(len(p) for p in parts), losses.shape[1]), dtype=losses.dtype)
    for rank, part in enumerate(parts):
        out[rank::world_size] = part
    return out


class _progress_bar:
    """tqdm over chunks with scored-input tokens per second in the postfix."""

    def __init__(self, desc, total, show):
        self.bar = tqdm(total=total, desc=desc, unit="chunk", dynamic_ncols=True, disable=not show)
        self.tokens, self.began = 0, time.perf_counter()

    def __enter__(self):
        return self

    def __call__(self, chunks, tokens):
        self.tokens += tokens
        self.bar.update(chunks)
        self.bar.set_postfix_str(f"{self.tokens / (time.perf_counter() - self.began):,.0f} tok/s")

    def __exit__(self, *exc):
        self.bar.close()


def _peak_memory_mb(device) -> float:
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: kilobytes


def dataset_name(neox_args) -> str:
    """Short name of the evaluated data: the dataset file stem(s) without `_text_document`."""
    paths = getattr(neox_args, f"{neox_args.eval_split}_data_paths") or [neox_args.data_path]
    names = [pathlib.Path(str(p)).name.removesuffix("_text_document") for p in paths if p]
    return "+".join(names) or "unknown"


def method_name(neox_args) -> str:
    window = neox_args.attention_window
    return neox_args.pos_emb + (f"+window{window}" if window else "")


# Settings that do not change what was trained or how it is scored stay out of the config hash.
_UNHASHED_GROUPS = (groups.EvaluationArgs, groups.LoggingArgs, groups.LauncherArgs)
# The seed stays out too, so the seeds of one configuration share a hash (NeoXArgs.config_hash hashes all).
_UNHASHED_KEYS = {"seed", "load", "save", "iteration", "finetune", "config_files", "config_sources", "rank",
                  "local_rank", "num_workers", "data_cache_path"}


def training_config_hash(trained: dict) -> str:
    skip = _UNHASHED_KEYS | {f.name for g in _UNHASHED_GROUPS for f in dataclasses.fields(g)}
    config = {k: v for k, v in trained.items() if k not in skip}
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def trained_config(neox_args) -> dict:
    """The config the checkpoint was trained with (stored in it by train.py): seed, train length and
    config hash come from here, not from the evaluating config, which may be launched differently."""
    return read_client_state(neox_args.load, resolve_tag(neox_args.load, neox_args.iteration))["neox_args"]


def run_identity(neox_args, trained: dict, iteration: int) -> dict:
    digest = training_config_hash(trained)
    dataset, method = dataset_name(neox_args), method_name(neox_args)
    return {
        "name": f"{dataset}_{method}_seed{trained['seed']}_step{iteration}_{digest[:8]}",
        "method": method, "pos_emb": neox_args.pos_emb, "attention_window": neox_args.attention_window,
        "seed": trained["seed"], "dataset": dataset, "train_length": trained["seq_length"],
        "checkpoint": str(neox_args.load), "checkpoint_step": int(iteration), "config_hash": digest,
        "num_layers": neox_args.num_layers, "hidden_size": neox_args.hidden_size,
        "num_attention_heads": neox_args.num_attention_heads,
    }
