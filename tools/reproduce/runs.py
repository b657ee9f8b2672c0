"""The sweep's runs: one per (dataset, method, seed) and per (dataset, training variant, seed), the
extensions (fine-tunes of a plain run's checkpoint at a longer context, trained after it), plus
evaluation-only runs that re-evaluate a base run's checkpoint (the windowed baseline, and each of
`variants`); where each keeps its files, and which of them are already finished."""
import dataclasses
import functools
import json
import pathlib

import yaml

from megatron.evaluation.identity import Method, RunIdentity, config_hash, evaluation_variant
from megatron.evaluation.results import ResultFileError, load_result
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.yaml_loader import parse_value
from .spec import Dataset, Sweep


class RunFailed(Exception):
    """One run could not finish; the message says which step and where its log is."""


@dataclasses.dataclass
class Run:
    sweep: Sweep
    dataset: Dataset
    method: str                   # the pos-emb
    seed: int
    base: "Run | None" = None     # set for evaluation-only runs (the windowed baseline, variants)
    window: int | None = None     # the windowed baseline's attention-window: the training length
    variant: dict | None = None   # a variant's per-run options (NeoX keys), set at evaluation only
    trained: str | None = None    # the label of a training variant (sweep.training_variants), trained on its own
    extension: str | None = None  # the label of an extension (sweep.extensions), a fine-tune of `extends`
    extends: "Run | None" = None  # the plain run whose final checkpoint an extension starts from

    @property
    def named(self) -> str | None:
        """The sweep's name for this trained run's keys: its training variant's or its extension's label."""
        return self.trained or self.extension

    @property
    def after(self) -> "Run | None":
        """The run that must finish first: the base whose checkpoint this one evaluates, or the one it extends."""
        return self.base or self.extends

    @property
    def identity(self) -> RunIdentity:
        """What evaluate.py writes into this run's result file (identity.py)."""
        return RunIdentity(self.dataset.name, self.method, self.window, self.seed,
                           config_hash(self.args().to_dict(), NeoXArgs.trained_keys()), self.label.variant)

    @functools.cached_property
    def written_label(self) -> Method:  # cached: the label reads the run's config (NeoXArgs), once
        """The label evaluate.py writes into the result file (identity.evaluation_variant): the per-run
        options and the switches a training variant may set (layer-pattern, attention-temperature,
        random-positions), not the training variant's name, which inputs.collect adds (`label`)."""
        return Method(self.method, self.window,
                      evaluation_variant(self.args({**self.model_overrides(), **(self.variant or {})})))

    @property
    def label(self) -> Method:
        written = self.written_label
        if not self.named:
            return written
        # The training variant's (extension's) name stands for its keys; an evaluation variant adds its own label.
        return Method(self.method, self.window, "+".join(filter(None, (self.named, self.variant and written.variant))))

    @property
    def directory(self) -> pathlib.Path:
        return self.sweep.work_dir / self.dataset.name / self.label / f"seed{self.seed}"

    @property
    def owner(self) -> "Run":
        """The run that trained this run's checkpoint (itself, or the windowed run's base)."""
        return self.base or self

    @property
    def checkpoints(self) -> pathlib.Path:
        return self.owner.directory / "checkpoints"

    @property
    def results_dir(self) -> pathlib.Path:
        return self.directory / "eval"

    def __str__(self):
        return f"{self.dataset.name}/{self.label}/seed{self.seed}"

    def model_overrides(self) -> dict:
        """NeoX keys of this run's model, data and seed on top of the profile (no folders: they follow
        from the label, which follows from these)."""
        trained = (self.sweep.training_variants[self.method][self.trained] if self.trained else
                   self.sweep.extensions[self.method][self.extension] if self.extension else {})
        return {**self.sweep.overrides, **trained,
                **{k.replace("-", "_"): v for k, v in self.dataset.tokenizer.items()}, "pos_emb": self.method,
                "seed": self.seed, "data_path": self.dataset.prefix}

    def training_overrides(self) -> dict:
        """NeoX keys of this run's training on top of the profile. An extension starts from the final checkpoint
        of the run it extends (`finetune`: its weights, a fresh optimizer and schedule) and resumes from its own
        `save` folder once that holds a checkpoint (train.py's fine-tune rule)."""
        start = {"finetune": True, "load": str(self.extends.checkpoints)} if self.extends else {}
        return {**self.folders(), **start}

    def folders(self) -> dict:
        """NeoX keys of this run's model and folders on top of the profile (evaluation loads its own checkpoints)."""
        owner = self.owner.directory
        return {**self.model_overrides(),
                "save": str(self.checkpoints), "load": str(self.checkpoints),
                "tensorboard_dir": str(owner / "tensorboard"), "log_dir": str(owner / "logs"),
                # Own sample-index cache: parallel runs of one seed would otherwise write the same files.
                "data_cache_path": str(owner / "data_cache")}

    def evaluation_overrides(self) -> dict:
        overrides = {**self.folders(), **self.sweep.evaluation, "eval_results_dir": str(self.results_dir)}
        if self.window:
            overrides["attention_window"] = self.window
        return {**overrides, **(self.variant or {})}

    @property
    def ruler_dir(self) -> pathlib.Path:
        """Where eval.py writes the run's RULER results (its lm_eval/ folder under the results folder)."""
        return self.results_dir / "lm_eval"

    def ruler_overrides(self) -> dict:
        """eval.py's keys: the evaluation's, the sweep's RULER tasks and samples per length."""
        return {**self.evaluation_overrides(), "eval_tasks": self.sweep.ruler["tasks"],
                "eval_task_limit": self.sweep.ruler["limit"]}

    def args(self, overrides=None) -> NeoXArgs:
        """The config the launched script reads: each value as its `--set` reads it back (a mapping's keys
        normalised, `original-max-position` -> `original_max_position`), so hashes and labels match its files."""
        given = overrides or self.training_overrides()
        return NeoXArgs.from_ymls(self.sweep.profile, {k: parse_value(set_text(v)) for k, v in given.items()},
                                  world_size=1)


def set_text(value) -> str:
    """The value as `--set` reads it back (YAML): strings bare where YAML keeps them strings."""
    if isinstance(value, str) and yaml.safe_load(value) == value:
        return value
    return json.dumps(value)


def plan_runs(sweep: Sweep, datasets) -> list[Run]:
    """Seed-major order: a grid cut short still compares every method on the same seeds."""
    runs = []
    for seed in sweep.seeds:
        for dataset in datasets:
            for method in sweep.methods:
                run = Run(sweep, dataset, method, seed)
                runs.append(run)
                runs += [Run(sweep, dataset, method, seed, trained=label) for label in sweep.training_variants.get(method, {})]
                runs += [Run(sweep, dataset, method, seed, extension=label, extends=run)
                         for label in sweep.extensions.get(method, {})]
                if method == sweep.windowed_baseline:
                    runs.append(Run(sweep, dataset, method, seed, base=run, window=run.args().seq_length))
                runs += [Run(sweep, dataset, method, seed, base=run, variant=v) for v in sweep.variants.get(method, [])]
    return runs


def trained_step(run: Run) -> int | None:
    from megatron.checkpoint.checkpointing import checkpoint_steps
    steps = checkpoint_steps(run.checkpoints)
    return steps[-1] if steps else None


def finished_result(run: Run, train_iters: int) -> pathlib.Path | None:
    """The run's result file if it is this run's (same identity and config hash), scores the final
    checkpoint at every (length, mode) of the plan, on the split, chunks and chunk seed the sweep asks for."""
    plan = run.sweep.evaluation
    lengths, modes = plan.get("eval_lengths") or [], plan.get("eval_modes") or ["nonoverlap"]
    settings = {"split": plan.get("eval_split"), "eval_seed": plan.get("eval_seed"),
                "eval_chunks": plan.get("eval_chunks")}
    identity, written = run.identity, str(run.written_label)
    for path in sorted(run.results_dir.glob("*.json")):
        try:
            document = load_result(path)
        except ResultFileError:
            continue
        have = {(r["length"], r["mode"]) for r in document["results"]}
        complete = all((L, m) in have for L in lengths for m in modes)
        same = all(v is None or document["evaluation"].get(k) == v for k, v in settings.items())
        ours = (document["run"].get("config_hash"), document["run"]["method"]) == (identity.config_hash, written)
        if document["run"]["checkpoint_step"] == train_iters and complete and same and ours:
            return path
    return None


def finished_ruler(run: Run, train_iters: int) -> pathlib.Path | None:
    """The run's eval.py result file if it holds every RULER task of the sweep at every eval-length, for the
    final checkpoint of this run (same identity and config hash), with the sweep's samples per length."""
    ruler, lengths = run.sweep.ruler, run.sweep.evaluation.get("eval_lengths") or []
    identity, written = run.identity, str(run.written_label)
    for path in sorted(run.ruler_dir.glob("*.json")):
        try:
            document = json.loads(path.read_text())
            evaluation, measured = document["evaluation"], document.get("ruler") or {}
            complete = all(str(n) in measured.get(task, {}) for task in ruler["tasks"] for n in lengths)
            same = evaluation.get("limit") == ruler["limit"] and evaluation["ruler"]["lengths"] == sorted(lengths)
            ours = (document["run"]["config_hash"], document["run"]["method"]) == (identity.config_hash, written)
            if document["run"]["checkpoint_step"] == train_iters and complete and same and ours:
                return path
        except (OSError, ValueError, KeyError, TypeError):  # not a finished eval.py file of this run
            continue
    return None


def check_training_config(run: Run) -> str:
    """The hash of the run's training config; a RunFailed when its folder already holds checkpoints
    trained with another one (the sweep or profile changed since): those are never reused silently."""
    owner = run.owner
    stamp, digest = owner.directory / "training_config.json", run.identity.config_hash
    stored = json.loads(stamp.read_text()) if stamp.is_file() else {}
    if trained_step(owner) is not None and stored.get("config_hash", digest) != digest:
        raise RunFailed(f"{owner.checkpoints} holds checkpoints of a different training config (the sweep or "
                        "profile changed since); delete that run folder to retrain it, or give the sweep "
                        "another work_dir")
    # An extension's weights also come from its base run: checkpoints fine-tuned from another base are not its.
    base = owner.extends and extended_config(owner)
    if base and trained_step(owner) is not None and stored.get("extends", base) != base:
        raise RunFailed(f"{owner.checkpoints} holds a fine-tune of a base run of a different training config (the "
                        f"sweep or profile of {owner.extends} changed since); delete {owner.directory} to extend the "
                        "base run as it is now, or give the sweep another work_dir")
    return digest


def extended_config(run: Run) -> str:
    """For an extension's stamp: the config hash of the run whose checkpoint it fine-tunes."""
    return run.extends.identity.config_hash
