"""The pieces of one run's evaluation: the checked plan, the token stream and its chunks, opening the run (its
checkpoint, read once, and the result file's `run`), one (length, mode) record. evaluate.py's driver
(megatron/evaluation/driver.py) uses them all; eval.py's (lm_eval_run.py) the plan and opening the run."""
import pathlib
import resource

import numpy as np
import torch

from megatron.checkpoint.folder import missing_why
from megatron.data import DataError, build_evaluation_stream
from megatron.errors import NeoXArgsError
from megatron.checkpoint.inference_model import OpenCheckpoint, TrainingRecord, open_checkpoint
from megatron.quoting import quote
from .chunks import chunk_starts
from .identity import RunIdentity, config_hash
from .labels import evaluated_parts, readable_label, trained_parts, variant
from .modes import get_mode
from .run_keys import EvaluatedRun, RunStart
from .settings import EvaluationSettings


class EvaluationError(NeoXArgsError):
    """Evaluation cannot run as configured (missing checkpoint, bad eval keys, data too short)."""


def checked_plan(settings: EvaluationSettings):
    """What the config does not check already (it checks eval-lengths, eval-modes, eval-stride and
    eval-chunks): that there is a checkpoint to evaluate. (lengths, modes)."""
    lengths = list(settings.lengths)
    modes = [get_mode(name) for name in settings.modes]
    if not settings.load:
        raise EvaluationError("`load` is not set: evaluation needs the checkpoint folder of a trained run "
                              "(the `save` folder of its training config)")
    if not pathlib.Path(settings.load).is_dir():
        problem = missing_why(settings.load)  # a file, a link loop, a link to nothing, or nothing
        raise EvaluationError(f"checkpoint folder {settings.load} (key `load`) {problem}; point `load` "
                              "at the `save` folder of a finished training run")
    return lengths, modes


def evaluation_stream(start: RunStart, split: str, tokenizer) -> np.ndarray:
    """The eval split's tokens; where no data is set and the model came from a checkpoint that keeps only
    its model (no resolved_config.yml), the error says why the checkpoint could not give the data."""
    try:
        return np.asarray(build_evaluation_stream(start.data, split, tokenizer))
    except DataError as err:
        if start.model_only_from is None:
            raise
        raise DataError(f"{err} The model came from {start.model_only_from}, which keeps no resolved_config.yml "
                        "(written before checkpoints kept their config): its model-states file records the model, "
                        "not the run's data. Give the data the run was trained on, e.g. --set data-path=PREFIX (and "
                        "its split), or the run's own config files.") from None


def planned_starts(stream, length, settings: EvaluationSettings, eod: int | None = None):
    """The chunks scored at `length`; with eval-documents: within, only those inside one document (`eod`:
    the tokenizer's end-of-document id)."""
    within = (stream == eod) if settings.documents == "within" else None
    try:
        return chunk_starts(len(stream), length, settings.chunks, settings.seed, within)
    except ValueError as e:
        raise EvaluationError(f"eval-lengths: at length {length}, {e} (eval-split "
                              f"{settings.split!r})") from None


def skipped_records(pos_emb: str, length, modes, limit, say):
    message = (f"pos-emb {pos_emb} embeds at most {limit} positions (max-position-embeddings), "
               f"so it cannot score length {length}; only relative methods evaluate beyond it")
    say(f"L={length}: skipped: {message}", flush=True)
    return [{"length": length, "mode": mode.name, "skipped": message} for mode in modes]


def scored_record(mode, context, device, say) -> dict:
    """One (length, mode) record: the mode's fields, then when and how much it cost."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    context.mode, context.seconds = mode.name, 0.0
    record = finite({"length": context.length, "mode": mode.name, **mode.score(context)})
    record.update(seconds=round(context.seconds, 3), peak_memory_mb=_peak_memory_mb(device))
    stderr = f" ± {record['stderr']:.4f}" if record.get("stderr") is not None else ""
    say(f"L={context.length} {mode.name}: loss {record['loss']:.4f}{stderr}, ppl {record['ppl']:.3f}, "
        f"{record['chunks']} chunks, {record['tokens']:,} tokens, {context.seconds:.1f} s", flush=True)
    return record


def finite(record: dict) -> dict:
    """`record`, refused when its loss is NaN or infinite: a result of NaN is not a result, and a table
    would pick it up as one."""
    if not float("-inf") < record["loss"] < float("inf"):
        raise EvaluationError(f"L={record['length']} {record['mode']}: the loss is {record['loss']}, not a result "
                              "(NaN/inf logits: weights, or a method, that overflow at this length and dtype); "
                              "nothing was written. Check the checkpoint (another step: `iteration`), or evaluate "
                              "in float32 if the run used a lower precision.")
    return record


def _peak_memory_mb(device) -> float:
    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)  # Linux: kilobytes


def open_run(settings: EvaluationSettings, evaluated: EvaluatedRun) -> tuple[OpenCheckpoint, dict]:
    """The checkpoint `load` names (at `iteration`), read once, and the result file's `run` for it: how both
    evaluation drivers open a run. `load(opened, evaluation.inference)` then builds its model without reading it again."""
    opened = open_checkpoint(settings.load, settings.iteration)
    return opened, run_record(evaluated, settings.load, opened.trained)


def run_record(evaluated: EvaluatedRun, checkpoint: str, record: TrainingRecord) -> dict:
    """The result file's `run`: the identity (identity.py) and what else describes the checkpoint. The
    seed, train length and config hash come from the config the checkpoint was trained with (stored in it
    by train.py), not from the evaluating config, which may be launched differently."""
    trained, iteration = record.config, record.step
    identity = RunIdentity(evaluated.dataset, evaluated.pos_emb, evaluated.attention_window, trained["seed"],
                           config_hash(trained, evaluated.trained_keys), variant(trained, evaluated.per_run_options))
    return {**run_labels(evaluated, checkpoint, trained), **training_budget(record),
        "name": identity.file_stem(iteration),
        "method": identity.method, "pos_emb": identity.pos_emb, "attention_window": identity.window,
        "variant": identity.variant,
        "seed": identity.seed, "dataset": identity.dataset, "train_length": trained["seq_length"],
        "checkpoint": str(checkpoint), "checkpoint_step": int(iteration), "config_hash": identity.config_hash,
        "num_layers": evaluated.num_layers, "hidden_size": evaluated.hidden_size,
        "num_attention_heads": evaluated.num_attention_heads,
    }


class RunNameError(EvaluationError):
    """The evaluating config names the run differently from its checkpoint."""


def run_labels(evaluated: EvaluatedRun, checkpoint: str, trained: dict) -> dict:
    """The result file's `run_name` (the checkpoint's own run-name; the evaluating config's only for a run
    trained without one), `label` (the name, or the method and what it was trained with, then the
    evaluation's per-run choices: labels.py) and `readable_label` (the label without the name)."""
    name = trained.get("run_name") or evaluated.run_name
    if trained.get("run_name") and evaluated.run_name not in (None, trained["run_name"]):
        raise RunNameError(
            f"run-name {quote(evaluated.run_name)} ({evaluated.run_name_from}) "
            f"differs from the name {quote(trained['run_name'])} the checkpoint {checkpoint} was trained "
            "under; a run keeps the name it was trained with (it is how its results are told apart). Leave "
            "run-name out of the evaluation, or rename it in tables and figures with --rename OLD=NEW.")
    trained_switches = trained_parts(trained)
    evaluated_choices = evaluated_parts(evaluated.per_run_options, evaluated.attention_window)
    readable = readable_label(evaluated.pos_emb, trained_switches, evaluated_choices)
    return {"run_name": name, "label": readable_label(evaluated.pos_emb, trained_switches, evaluated_choices, name),
            "readable_label": readable}


def training_budget(record: TrainingRecord) -> dict:
    """Steps and tokens the checkpoint was trained for: tables show them, and significance tests refuse
    runs of different budgets (tools/analysis/significance.py)."""
    trained, iteration, samples = record.config, record.step, record.consumed_train_samples
    if samples is None:  # a checkpoint that does not count them: every step took one global batch
        samples = int(iteration) * int(trained.get("train_batch_size") or 0)
    return {"train_steps": int(iteration), "train_tokens": int(samples) * int(trained["seq_length"])}
