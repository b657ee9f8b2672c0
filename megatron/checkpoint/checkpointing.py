"""Checkpoints in NeoX's layout, written atomically, checked against the run that loads them.

    <save>/global_stepN/mp_rank_00_model_states.pt   model (+ our client state), DeepSpeed's files
    <save>/global_stepN/*optim_states.pt             optimizer (ZeRO partitions, bf16 masters)
    <save>/global_stepN/configs/*.yml                the config files of the run
    <save>/global_stepN/resolved_config.yml          the merged config (--set included), loadable as is
    <save>/latest                                    "global_stepN", the newest complete checkpoint

A save is written under a hidden temporary name, renamed into place once complete, and only then
named by `latest` (itself replaced atomically), so a crash mid-save leaves the previous checkpoint
in charge; a save that cannot write (a full disk) removes what it wrote and says why. The run's
architecture is stored with the weights; loading compares it with the loading run's and names every
difference instead of loading something else.
"""
import contextlib
import errno
import os
import pathlib
import random
import shutil

import numpy as np
import torch
from deepspeed.accelerator import get_accelerator
from deepspeed.runtime.checkpoint_engine.torch_checkpoint_engine import TorchCheckpointEngine

from megatron.checkpoint.folder import (RESOLVED_NAME, TAG, CheckpointError, checkpoint_steps,  # noqa: F401
                                       removed_while_read, resolve_tag)  # (re-exported)
from megatron.model.model_config import ModelConfig, differences, extension_keys
from megatron.checkpoint.plain_load import NotPlainData, as_plain_data, load_plain, verify_folder, weights_only_engine
from megatron.checkpoint.run_keys import CheckpointRun, InferenceRun
from megatron.quoting import quote

PARTIAL = ".global_step*.partial"  # a save being written (or left by a crashed one): `.{tag}.partial`
MODEL_STATES = ("mp_rank_00_model_states.pt", "zero_pp_rank_0_mp_rank_00_model_states.pt")  # ZeRO-3: 2nd


class SaveFailed(OSError):
    """A checkpoint could not be written (disk full, quota, I/O error); what it wrote is removed."""


# ------------------------------------------------------------------------------------------- read
def read_client_state(load_dir, tag: str) -> dict:
    """The checkpoint's model-states file (ours and DeepSpeed's keys), weights memory-mapped, read as data
    only (megatron/checkpoint/plain_load.py): a checkpoint may come from anyone."""
    folder = pathlib.Path(load_dir) / tag
    for name in MODEL_STATES:
        if (folder / name).is_file():
            try:
                return load_plain(folder / name)
            except NotPlainData:
                raise
            except Exception as err:  # truncated or foreign file: say which
                if not folder.is_dir():
                    raise CheckpointError(removed_while_read(folder)) from None
                raise CheckpointError(f"cannot read {folder / name}: {err}. The checkpoint is damaged; "
                                      "load another step with `iteration`.") from err
    if not folder.is_dir():
        raise CheckpointError(removed_while_read(folder))
    raise CheckpointError(f"{folder} contains no model states ({' or '.join(MODEL_STATES)}); it is empty "
                          f"or not a checkpoint of this project. Contents: {sorted(os.listdir(folder))}.")


def stored_model_config(state: dict, where) -> ModelConfig:
    """The ModelConfig a checkpoint's model-states (`read_client_state`) record."""
    if "model_config" not in state:
        raise CheckpointError(f"{where} was not written by this project's train.py (it records no model "
                              "config to check against), so it cannot be loaded safely.")
    try:
        return ModelConfig.from_record(state["model_config"])
    except (ValueError, TypeError, KeyError, AttributeError) as err:  # its own words name the config key, not the file
        first = str(err).split(". ")[0]
        raise CheckpointError(f"the checkpoint {where} records a model_config this project cannot read ({quote(first)}"
                              "): the file was damaged or edited, or written by another version of this project. "
                              "Load another checkpoint (`iteration`), or one train.py wrote.") from None


def check_compatible(saved: ModelConfig, run: ModelConfig, where, fine_tune: bool = False, config_read_from=()) -> None:
    """The checkpoint `where`, whose record is `saved` (stored_model_config's), is the model `run` is. `fine_tune`:
    train.py starting a fine-tune from its weights, which may also change the keys that shape no parameter
    (extension_keys: rotary-emb-base). `config_read_from`: the files the run's config was read from (run_keys.py),
    () where there is none."""
    mismatches = differences(saved, run, fine_tune)
    if mismatches and _config_came_from(config_read_from, pathlib.Path(where) / RESOLVED_NAME):
        # The advice below would send the user back to the file this run already used.
        raise CheckpointError(f"the checkpoint {where} contradicts itself: the model its model-states file records "
                              f"differs from its own {RESOLVED_NAME}, which this run's config came from: "
                              + quote("; ".join(mismatches)) + ". It was damaged or edited; load another step "
                              "(`iteration`) or a checkpoint train.py wrote.")
    if mismatches and fine_tune:
        free = ["the attention window", "rotary-scaling",
                *(k.replace("_", "-") for k in extension_keys(run.pos_emb, run.layer_pattern))]
        raise CheckpointError(f"this fine-tune (finetune: true) starts from the weights of {where}, but they belong "
                              "to a different model: " + "; ".join(mismatches) + ". A fine-tune keeps the architecture "
                              "(layers, sizes, method and its parameters' options) and may change only the lengths "
                              f"(seq-length), {', '.join(free[:-1])} and {free[-1]}. "
                              f"Take the model keys from {pathlib.Path(where) / RESOLVED_NAME}, or leave them out of "
                              "this config (they then come from the checkpoint).")
    if mismatches:
        raise CheckpointError(f"the checkpoint {where} was made by a different model: "
                              + "; ".join(mismatches) + f". Load it with the config it was trained with: "
                              f"{pathlib.Path(where) / RESOLVED_NAME} (every key of that run, --set included).")


def weights_dtype(model: torch.nn.Module) -> str:
    """'float32', 'bfloat16' or 'float16': what the trained weights are kept in."""
    return str(next(model.parameters()).dtype).removeprefix("torch.")


def stored_weights_dtype(state: dict) -> str:
    """The dtype a checkpoint's weights were trained in; checkpoints from before it was recorded trained bf16
    on DeepSpeed's bf16 engine (bf16 weights)."""
    if "weights_dtype" in state:
        return state["weights_dtype"]
    precision = (state.get("neox_args") or {}).get("precision")
    return {"bf16": "bfloat16", "fp16": "float16"}.get(precision, "float32")


TRAINED_BY = {"bfloat16": "precision: bf16 with bf16-weights: bf16", "float16": "precision: fp16",
              "float32": "precision: fp32, or bf16 with bf16-weights: fp32"}


def _check_weights_dtype(state: dict, run: CheckpointRun, engine, where) -> None:
    """Weights load in any dtype (cast). The optimizer state of DeepSpeed's bf16 engine without ZeRO resumes on
    fp32 weights (megatron/training/optimizer.py takes its fp32 master weights); other changes of the weights' dtype
    cannot take the optimizer state along."""
    stored, here = stored_weights_dtype(state), weights_dtype(engine.module)
    if stored == here or run.finetune or run.no_load_optim:
        return
    if stored == "bfloat16" and here == "float32" and not engine.zero_optimization():
        return
    raise CheckpointError(
        f"the checkpoint {where} was trained with {stored} weights and this run keeps {here} weights"
        f"{' under ZeRO stage ' + str(engine.zero_optimization_stage()) if engine.zero_optimization() else ''}: "
        f"its optimizer state cannot be resumed in that form. Resume it as it was trained ({TRAINED_BY.get(stored, stored)}), "
        "or load its weights alone with a fresh optimizer (--set no-load-optim=true).")


def _config_came_from(config_read_from, resolved: pathlib.Path) -> bool:
    """Some key of the run's config was read from `resolved` (given as a config file, or taken from the
    checkpoint by from_checkpoint.py): `config_read_from` names the files its keys came from."""
    if not resolved.is_file():  # () read from: the model is the checkpoint's own record
        return False
    for path in config_read_from:
        with contextlib.suppress(OSError):
            if pathlib.Path(path).is_file() and os.path.samefile(path, resolved):
                return True
    return False


# -------------------------------------------------------------------------------------- evaluation
def load_model_weights(run: InferenceRun, model: torch.nn.Module) -> int:
    """Load the weights of checkpoint `run.load` (step `iteration`, else `latest`) into a bare
    model, for evaluation; returns the step. The model may be built for any sequence length unless
    its method is `learned`. Anything that would leave the model not exactly the trained one is a
    CheckpointError naming what differs."""
    if not run.load:
        raise CheckpointError("no checkpoint to evaluate: set `load` to the `save` directory of a "
                              "training run (and `iteration` to pick a step other than the latest).")
    tag = resolve_tag(run.load, run.iteration)
    where = pathlib.Path(run.load) / tag
    return load_weights_of(read_client_state(run.load, tag), where, model, config_read_from=run.config_read_from)


def load_weights_of(state: dict, where, model: torch.nn.Module, run: ModelConfig | None = None,
                    config_read_from=()) -> int:
    """load_model_weights for checkpoint folder `where` whose model-states file was read already (`state`:
    read_client_state's): checked against the run's model `run` (default: the model's own config), loaded
    exactly; returns the step. `config_read_from`: as check_compatible's."""
    check_compatible(stored_model_config(state, where), run or model.config, where, config_read_from=config_read_from)
    return load_weights(state, where, model)


def load_weights(state: dict, where, model: torch.nn.Module) -> int:
    """The weights of checkpoint folder `where` (its model-states file read already: `state`) loaded exactly into
    `model`, built as the model its record describes (check_compatible's); returns the step."""
    where = pathlib.Path(where)
    if state.get("ds_config", {}).get("zero_optimization", {}).get("stage", 0) == 3:
        from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint
        try:  # the partitions are read now, after the model states: a step pruned in between is said so
            verify_folder(where)  # zero_to_fp32 unpickles every file it reads
            weights = get_fp32_state_dict_from_zero_checkpoint(str(where.parent), tag=where.name)
        except (CheckpointError, OSError, ValueError):
            if where.is_dir():
                raise
            raise CheckpointError(removed_while_read(where)) from None
    else:
        weights = state["module"]
    _load_exactly(model, weights, where)
    return stored_step(state, where)


def stored_step(state: dict, where) -> int:
    """The step of checkpoint `where` (a global_stepN folder): N, which its file must say too. A result is
    reported under this step, so a file that disagrees with its folder (copied or edited) is refused."""
    step = int(TAG.fullmatch(pathlib.Path(where).name).group(1))
    if state.get("iteration") != step:
        held = state.get("iteration")
        # A step is found by its folder's name only, so the one way to load these weights is under the name
        # that matches their file: `iteration` cannot reach a folder that is not there.
        fix = (f"To load it, rename the folder back to {pathlib.Path(where).parent / f'global_step{held}'} (and, if "
               f"`latest` names it, write global_step{held} into `latest`); or use a checkpoint train.py wrote."
               if isinstance(held, int) and not isinstance(held, bool) and held >= 0 else
               "The file is damaged or not from this project: use a checkpoint train.py wrote.")
        raise CheckpointError(f"{where} is the folder of step {step}, but its model-states file says iteration "
                              f"{quote(held)}: the folder was renamed or the file copied from another step. {fix}")
    return step


def _load_exactly(model: torch.nn.Module, weights: dict, where) -> None:
    own = model.state_dict()
    missing = sorted(set(own) - set(weights))
    unexpected = sorted(set(weights) - set(own))
    reshaped = [f"{k} {tuple(weights[k].shape)} vs {tuple(own[k].shape)}"
                for k in own if k in weights and weights[k].shape != own[k].shape]
    if missing or unexpected or reshaped:
        raise CheckpointError(f"the weights in {where} do not fit this model: missing {quote(missing)}, "
                              f"unexpected {quote(unexpected)}, shapes (checkpoint vs model) {quote(reshaped)}.")
    # Training never saves NaN/inf weights (it stops instead), and their scores would be NaN results.
    broken = [k for k, v in weights.items() if v.is_floating_point() and not torch.isfinite(v).all()]
    if broken:
        raise CheckpointError(f"the weights in {where} hold NaN or inf ({quote(broken)}), which training never saves: "
                              "the file is damaged or was edited. Load another step with `iteration`.")
    model.load_state_dict(weights)


# -------------------------------------------------------------------------------------- training
def save_checkpoint(run: CheckpointRun, engine, iteration: int, consumed_samples: int) -> pathlib.Path:
    """Save step `iteration` (collective: every rank calls it). Returns the checkpoint folder."""
    save_dir = pathlib.Path(run.save)
    tag = f"global_step{iteration}"
    partial = f".{tag}.partial"
    rank = torch.distributed.get_rank()
    if rank == 0:
        save_dir.mkdir(parents=True, exist_ok=True)
        remove_partial_saves(save_dir)
    torch.distributed.barrier()
    client_state = {
        "iteration": iteration,
        "consumed_train_samples": consumed_samples,
        "model_config": engine.module.config.record(),
        "neox_args": as_plain_data(run.stored_config),  # the key checkpoints have always kept the config under
        "rng_state": rng_state(),
        "weights_dtype": weights_dtype(engine.module),  # bf16 runs keep fp32 or bf16 weights (bf16-weights)
    }
    if run.length_schedule is not None:  # the stage of the step that made these weights
        client_state["length_stage"] = run.length_schedule.at(max(iteration - 1, 0)).record()
    # Every write happens before anything is renamed; a failure on any rank is shared, so every rank
    # finishes DeepSpeed's collective steps and then all stop together, with the partial files removed.
    with _failures_kept(engine) as failures:
        try:
            engine.save_checkpoint(str(save_dir), tag=partial, client_state=client_state, save_latest=False)
        except OSError as err:  # DeepSpeed's own folder creation
            failures.append(err)
    if rank == 0 and not failures:
        try:
            _write_config_files(save_dir / partial / "configs", run.config_files)
            (save_dir / partial / RESOLVED_NAME).write_text(run.resolved_yaml)
            _write_synced(save_dir / LATEST_NEXT, tag)
        except OSError as err:
            failures.append(err)
    everyone = [None] * torch.distributed.get_world_size()
    torch.distributed.all_gather_object(everyone, write_failure(failures[0]) if failures else None)
    problem = next((p for p in everyone if p), None)
    if problem:
        if rank == 0:
            shutil.rmtree(save_dir / partial, ignore_errors=True)
            (save_dir / LATEST_NEXT).unlink(missing_ok=True)
        torch.distributed.barrier()
        latest = save_dir / "latest"
        kept = f"`latest` still names {latest.read_text().strip()}" if latest.is_file() else "no checkpoint was saved"
        cause, fix = problem
        raise SaveFailed(f"checkpoint step {iteration} could not be saved in {save_dir}: {cause}. What it wrote "
                         f"was removed and {kept}. {fix}, then resume from the last checkpoint.")
    if rank == 0:
        _commit(save_dir, partial, tag)
        _prune(save_dir, run.keep_last_n_checkpoints)
    torch.distributed.barrier()
    return save_dir / tag


def remove_partial_saves(save_dir) -> None:
    """Remove the hidden folders of saves that never completed (a crash or kill mid-save): nothing names
    them, and on a full disk they may be what filled it. Only while holding the save folder (its lock,
    or a save in progress), so never another run's save being written."""
    for stale in pathlib.Path(save_dir).glob(PARTIAL):
        shutil.rmtree(stale)


LATEST_NEXT = "latest.tmp"  # written with the checkpoint, renamed to `latest` once the checkpoint is in place


def write_failure(err: BaseException) -> tuple[str, str]:
    """(the cause of a failed write in words, naming the file; the fix, as the start of a sentence)."""
    full = isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT)
    if full:
        cause = "no space left on device" if err.errno == errno.ENOSPC else "disk quota exceeded"
    else:
        cause = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    if getattr(err, "filename", None):
        cause += f" (writing {err.filename})"
    fix = "Free space on that file system (or give `save` a folder on another one)" if full else \
        "Fix the file system (or give `save` another folder)"
    return cause, fix


@contextlib.contextmanager
def _failures_kept(engine):
    """DeepSpeed's file writes during one save, each failure kept (not raised) in the list yielded, later
    writes skipped. torch.save given a path reports a full disk as "unexpected pos N vs M" and nothing
    else; given a Python file, the file's OSError (ENOSPC) is in the chain of what it raises, so
    DeepSpeed's torch writer is replaced by one that opens the file here."""
    writer = engine.checkpoint_engine
    patched = "save" in vars(writer)  # a writer set on the instance (tests) is used as it is
    write = writer.save
    if isinstance(writer, TorchCheckpointEngine) and not patched:
        def write(state_dict, path):
            with open(path, "wb") as f:
                torch.save(state_dict, f, _use_new_zipfile_serialization=writer.zipfile_serialization)
    failures = []

    def kept(state_dict, path):
        if failures:
            return
        try:
            write(state_dict, path)
        except (OSError, RuntimeError) as raised:
            err = raised
            while err is not None and not isinstance(err, OSError):  # torch wraps the file's error
                err = err.__cause__ or err.__context__
            err = err or raised
            if isinstance(err, OSError) and not err.filename:
                err.filename = str(path)
            failures.append(err)

    writer.save = kept
    try:
        yield failures
    finally:
        if patched:
            writer.save = write
        else:
            del writer.save


def _write_config_files(folder: pathlib.Path, files: dict) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / pathlib.Path(name).name).write_text(text)


def _commit(save_dir: pathlib.Path, partial: str, tag: str) -> None:
    """Move the finished checkpoint into place, then point `latest` at it (both atomic renames, no writes:
    `latest.tmp` was written with the checkpoint)."""
    final = save_dir / tag
    if final.exists():  # the same step saved again (e.g. after resuming): replace it
        old = save_dir / f".{tag}.old"
        shutil.rmtree(old, ignore_errors=True)
        os.replace(final, old)
        os.replace(save_dir / partial, final)
        shutil.rmtree(old)
    else:
        os.replace(save_dir / partial, final)
    os.replace(save_dir / LATEST_NEXT, save_dir / "latest")  # written with the checkpoint: renames only here


def _write_synced(path: pathlib.Path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _prune(save_dir: pathlib.Path, keep: int | None) -> None:
    if not keep or keep < 1:  # NeoXArgs refuses < 1; a slice [:-keep] of a negative would delete them all
        return
    for step in checkpoint_steps(save_dir)[:-keep]:
        shutil.rmtree(save_dir / f"global_step{step}")


def load_checkpoint(run: CheckpointRun, engine) -> tuple[int, int]:
    """Resume from `load`: model, optimizer, LR schedule, RNG and data position. Returns (iteration,
    consumed training samples); (0, 0) when `load` holds no checkpoint yet (the first launch of a
    run whose `load` is its own `save`). `finetune` loads the weights only and starts at step 0, unless it
    saved in `save` already: then it resumes from there (fine_tune_so_far)."""
    if not run.load:
        return 0, 0
    nothing_yet = not checkpoint_steps(run.load) and not (pathlib.Path(run.load) / "latest").exists()
    if nothing_yet and run.iteration is None and not run.finetune:
        if torch.distributed.get_rank() == 0:
            print(f"no checkpoint in {run.load} yet: starting from step 0", flush=True)
        return 0, 0
    load, iteration, weights_only = run.load, run.iteration, run.finetune
    if weights_only and (own := fine_tune_so_far(run)):  # a relaunched fine-tune resumes itself
        load, iteration, weights_only = own, None, False
    tag = resolve_tag(load, iteration)
    where = pathlib.Path(load) / tag
    client_state = read_client_state(load, tag)
    check_compatible(stored_model_config(client_state, where), engine.module.config, where, fine_tune=weights_only,
                     config_read_from=run.config_read_from)
    _check_weights_dtype(client_state, run, engine, where)
    verify_folder(where)  # DeepSpeed unpickles its files (model states, optimizer partitions) itself
    with weights_only_engine(engine):
        path, state = engine.load_checkpoint(
            load, tag=tag, load_module_only=weights_only,
            load_optimizer_states=not (weights_only or run.no_load_optim),
            load_lr_scheduler_states=not (weights_only or run.no_load_optim))
    if path is None:
        raise CheckpointError(f"DeepSpeed could not load {where}; see its messages above.")
    if weights_only:
        return 0, 0
    stored_step(state, where)
    if not run.no_load_rng:
        set_rng_state(state["rng_state"])
    if torch.distributed.get_rank() == 0:  # a fine-tune (above) starts at step 0 and resumes nothing
        again = (f": this fine-tune saved there already, so it continues (its starting weights came from "
                 f"{run.load})") if run.finetune else ""
        print(f"resumed from step {state['iteration']} ({where}){again}", flush=True)
    return state["iteration"], state["consumed_train_samples"]


def fine_tune_so_far(run: CheckpointRun) -> str | None:
    """The `save` folder of a fine-tune that has saved there already (relaunched after a stop or a crash), or
    None. It resumes from its own latest checkpoint: starting again from `load`'s weights at step 0 would
    train again what it has and overwrite it. A stage of a context extension is such a fine-tune."""
    save, load = run.save, run.load
    if not (run.finetune and save and load) or os.path.abspath(save) == os.path.abspath(load):
        return None
    return save if checkpoint_steps(save) or (pathlib.Path(save) / "latest").exists() else None


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "accelerator": get_accelerator().get_rng_state()}


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    get_accelerator().set_rng_state(state["accelerator"])
