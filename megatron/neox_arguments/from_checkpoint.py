"""A config that names a checkpoint with `load` may leave the model out: the keys that build the model and
its tokenizer, and those evaluation needs to read the run's data at its training length (and, for a config
that gives no model at all, the run's eval-lengths, eval-results-dir and tensorboard-dir), come from the checkpoint's own
merged config (`global_stepN/resolved_config.yml`), each with that file as its source; a checkpoint that
keeps none gives the model, tokenizer and lengths its model-states file records (`model_config`).

A key the user's config sets is kept (the checkpoint check then names any disagreement); per-run choices
(attention-window, attention-impl, ...) are never taken, except the rotary-scaling the checkpoint was trained
with (an extended model's), which a config that sets none takes. `load` naming a `global_stepN`
folder means its parent at step N. Nothing here imports torch (the config is read before the model is),
but to read the model-states file of a checkpoint that keeps no merged config.
"""
import pathlib

from megatron.checkpoint.folder import CheckpointError, TAG, read_pruning_aware, resolve_tag
from megatron.model.model_config import ARCHITECTURE_KEYS, checkpoint_keys, trained_choices

from .resolved import RESOLVED_NAME
from .yaml_loader import load_config_files, normalise_key

# Beyond the model (ModelConfig): the padded vocabulary, the run's seed, lengths, data and batch sizes (a
# config must have one), and the precision the inference dtype follows.
RUN_KEYS = ("make_vocab_size_divisible_by", "seed", "seq_length", "seq_length_val", "max_position_embeddings",
            "data_path", "train_data_paths", "valid_data_paths", "test_data_paths", "split",
            "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "precision")

# A checkpoint evaluated alone (the config gives no model) is evaluated as its training config would have it:
# at the run's extrapolation ladder, into the run's results folder, logged to the run's TensorBoard.
EVALUATION_DEFAULT_KEYS = ("eval_lengths", "eval_results_dir", "tensorboard_dir")


def checkpoint_source(values: dict, sources: dict, default_pos_emb: str) -> tuple[dict, dict]:
    """(values, sources) with `load` split into folder and step when it names a `global_stepN` folder, and
    the checkpoint's model, tokenizer and run keys filled in where `values` leaves them out. A `load` that
    holds no readable checkpoint (yet) changes nothing where the config gives the model (training starts
    fresh, evaluation says what is missing when it loads); where it gives none, that is the error."""
    spelling = {normalise_key(k): k for k in values}
    if values.get(spelling.get("load")) in (None, ""):
        return values, sources
    values, sources = dict(values), dict(sources)
    load = pathlib.Path(values[spelling["load"]])
    iteration = values.get(spelling.get("iteration"))
    if TAG.fullmatch(load.name) and load.is_dir() and not (load / "latest").exists():
        step = int(TAG.fullmatch(load.name).group(1))
        if iteration is not None and iteration != step:
            raise CheckpointError(f"{sources.get('load', 'the config')}: load names the checkpoint folder {load} "
                                  f"(step {step}) but iteration is {iteration} "
                                  f"({sources.get('iteration', 'the config')}); give one of them.")
        values[spelling["load"]] = str(load.parent)
        values[spelling.get("iteration", "iteration")] = step
        sources["iteration"] = sources.get("load", "the given config")
        load = load.parent
    given = {normalise_key(k) for k in values}
    no_model = not given & set(ARCHITECTURE_KEYS)  # then the checkpoint must say what the model is
    iteration = values.get(spelling.get("iteration", "iteration"))
    try:
        resolve_tag(load, iteration)
    except CheckpointError as err:
        if no_model:
            raise CheckpointError(f"{sources.get('load', 'the config')}: the config gives no model (num-layers, "
                                  f"pos-emb, ...), so it comes from the checkpoint `load` names, but {err}") from None
        return values, sources
    # A run still saving into `load` may prune the step between finding and reading it.
    return read_pruning_aware(load, iteration, lambda folder: _stored_config_source(
        folder, values, sources, default_pos_emb, given, no_model))


def _stored_config_source(folder, values, sources, default_pos_emb, given, no_model) -> tuple[dict, dict]:
    spelling = {normalise_key(k): k for k in values}
    resolved = folder / RESOLVED_NAME
    if not resolved.is_file():  # written before checkpoints kept one: its model_config gives the model
        if no_model:
            return _model_config_source(folder, values, sources)
        return values, sources
    stored, lines, _ = load_config_files([resolved])
    stored = {normalise_key(k): v for k, v in stored.items()}
    theirs = stored.get("pos_emb", default_pos_emb)
    if values.get(spelling.get("pos_emb"), theirs) != theirs:
        keys = RUN_KEYS  # another method than the checkpoint's: the checkpoint check names the difference
    else:
        # with the rotary-scaling its weights were trained with (an extended model's): evaluated without it,
        # they would score another model
        pattern = stored.get("layer_pattern")
        keys = checkpoint_keys(theirs, pattern) + trained_choices(theirs, pattern) + RUN_KEYS
    if no_model:
        keys = tuple(keys) + EVALUATION_DEFAULT_KEYS
    for key in keys:
        if key in stored and key not in given:
            values[key] = stored[key]
            sources[key] = f"checkpoint {lines.get(key, resolved)}"
            sources.update({path: f"checkpoint {line}" for path, line in lines.items()
                            if path.startswith((key + ".", key + "["))})
    return values, sources


MODEL_CONFIG_SOURCE = "checkpoint {folder} (model_config)"


def model_config_only(sources: dict) -> str | None:
    """The checkpoint folder whose model-states file gave the model (it keeps no merged config, so nothing
    else of its run is known), or None."""
    source = sources.get("pos_emb", "")
    prefix, suffix = MODEL_CONFIG_SOURCE.split("{folder}")
    return source[len(prefix):-len(suffix)] if source.startswith(prefix) and source.endswith(suffix) else None


def _model_config_source(folder: pathlib.Path, values: dict, sources: dict) -> tuple[dict, dict]:
    """`values` with the model, tokenizer and training lengths the model-states file of `folder` records
    (its ModelConfig), for a checkpoint that keeps no merged config: every entry point builds the same
    model from it (inference_model.load does the same for a checkpoint loaded alone). The run's data,
    batch sizes and eval-lengths are not recorded there; an entry point that needs one names it."""
    from megatron.checkpoint.checkpointing import read_client_state, stored_model_config  # torch: only for such checkpoints
    try:
        saved = stored_model_config(read_client_state(folder.parent, folder.name), folder)
    except CheckpointError as err:
        raise CheckpointError(f"{folder} keeps no {RESOLVED_NAME}, and the config gives no model (num-layers, "
                              f"pos-emb, ...), so the model comes from its model-states file, but {err} Give the "
                              f"run's own config files too, e.g. {folder / 'configs'}/*.yml.") from None
    recorded = {**saved.config_values(), **{k: v for k, v in saved.lengths.items() if k in RUN_KEYS}}
    given = {normalise_key(k) for k in values}
    for key, value in recorded.items():
        if value is not None and key not in given:
            values[key] = value
            sources[key] = MODEL_CONFIG_SOURCE.format(folder=folder)
    if not given & {"train_batch_size", "train_micro_batch_size_per_gpu"}:  # a config must name one; loading uses none
        values["train_micro_batch_size_per_gpu"] = 1
        sources["train_micro_batch_size_per_gpu"] = f"checkpoint {folder} (model_config records none; loading uses none)"
    return values, sources


# The keys that decide where a process writes, and eval-task-paths (lm-eval task folders can name Python
# to import). A checkpoint's stored config is data its sender wrote, not the user's config: given as a
# config file (README: `python evaluate.py <save>/global_stepN/resolved_config.yml ...`), it still gives
# the model and the data to read, but never these. They are left out rather than refused: the file is
# the documented way to use a checkpoint, and the user's own config or --set (or the default) decides
# where the results go, as with a checkpoint named by `load` alone.
WRITE_KEYS = ("run_dir", "save", "log_dir", "tensorboard_dir", "eval_results_dir", "sample_output_file", "data_cache_path",
              "eval_task_paths")


def is_stored_config(path) -> bool:
    """`path` is a config a checkpoint keeps: global_stepN/resolved_config.yml or global_stepN/configs/*.yml."""
    parent = pathlib.Path(path).resolve().parent
    return bool(TAG.fullmatch(parent.name) or (parent.name == "configs" and TAG.fullmatch(parent.parent.name)))


def drop_write_keys(paths, values: dict, sources: dict, overrides: dict) -> str | None:
    """Remove from `values` (and `sources`) the WRITE_KEYS that a checkpoint's stored config among `paths`
    set; returns the one-line note naming those `overrides` (--set) does not replace, or None."""
    stored = [str(pathlib.Path(p)) for p in paths if is_stored_config(p)]
    replaced = {normalise_key(k).split(".")[0] for k in overrides}
    dropped = []
    for key in list(values):
        name = normalise_key(key)
        if name in WRITE_KEYS and any(sources.get(name, "").startswith(f"{p}:") for p in stored):
            if values[key] is not None and name not in replaced:  # a null, or a --set, makes the note moot
                dropped.append(key.replace("_", "-"))
            del values[key]
            del sources[name]
    if not dropped:
        return None
    return (f"note: {', '.join(sorted(dropped))} from {', '.join(stored)} not applied: a checkpoint's stored config "
            "gives the model and data, never where this process writes (set them in your own config or with --set).")
