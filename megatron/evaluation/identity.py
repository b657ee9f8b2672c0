"""Which trained run a result belongs to: one identity (its method, with the variant labels.py makes), one config hash.

evaluate.py writes these into the result file's `run`, tables and figures group and colour by them,
and tools/reproduce plans its runs and recognises their finished results with them.
"""
import dataclasses
import hashlib
import json

from .labels import value_of, variant

WINDOW_MARK = "+window"


class Method(str):
    """A method as tables show it: `kerple_log`, `kerple_log+window64` for the run evaluated with
    attention-window 64, `rotary+yarn8` for one evaluated with a per-run option (`variant`, see
    `evaluation_variant`). It is the label string (so it keys dicts and prints as itself) and carries
    its parts, so nothing parses the label back.

    A run with a `run-name` is keyed by its `label` (the name and its per-run evaluation choices,
    labels.readable_label) instead; `display` is what tables and figures print: the label, else the
    readable one a result file carries, else the short label."""
    pos_emb: str
    window: int | None
    variant: str | None
    label: str | None
    readable: str | None

    def __new__(cls, pos_emb: str, window: int | None = None, variant: str | None = None,
                label: str | None = None, readable: str | None = None):
        short = pos_emb + (f"+{variant}" if variant else "") + (f"{WINDOW_MARK}{window}" if window else "")
        method = super().__new__(cls, label or short)
        method.pos_emb, method.window, method.variant = pos_emb, window or None, variant or None
        method.label, method.readable = label or None, readable or None
        return method

    @property
    def display(self) -> str:
        return self.label or self.readable or str(self)

    @property
    def short(self) -> "Method":
        """The hashed label of the method and its switches, whatever the run is named."""
        return Method(self.pos_emb, self.window, self.variant)

    def __reduce__(self):
        return Method, (self.pos_emb, self.window, self.variant, self.label, self.readable)

    @classmethod
    def of_run(cls, run: dict) -> "Method":
        """The method of a result file's `run` (its pos_emb, attention_window and variant fields; its
        `label` when the run is named, `readable_label` otherwise)."""
        return cls(run["pos_emb"], run.get("attention_window"), run.get("variant"),
                   run.get("label") if run.get("run_name") else None, run.get("readable_label"))


def evaluation_variant(config, trained=None) -> str | None:
    """The variant label (`variant`) of a run's config (NeoXArgs or the config dict a checkpoint stores), with its
    method's per-run options as that config sets them. `trained`: the config the checkpoint stores (kept in its
    model-states file), which says what the run was trained with whatever `config` restates;
    without it, `config` is taken as the training config."""
    from megatron.model.positional_embeddings import per_run_options

    options = {name: value_of(config, name) for name in per_run_options(value_of(config, "pos_emb"))}
    return variant(config if trained is None else trained, options)


@dataclasses.dataclass(frozen=True)
class RunIdentity:
    dataset: str
    pos_emb: str
    window: int | None
    seed: int
    config_hash: str
    variant: str | None = None

    @property
    def method(self) -> Method:
        return Method(self.pos_emb, self.window, self.variant)

    def file_stem(self, step: int) -> str:
        """The result file's name: `<dataset>_<method>_seed<S>_step<N>_<hash[:8]>`."""
        return f"{self.dataset}_{self.method}_seed{self.seed}_step{step}_{self.config_hash[:8]}"


def config_hash(config: dict, trained_keys: dict) -> str:
    """sha256 of a training config's values of `trained_keys` ({key: default}: NeoXArgs.trained_keys(), the
    config keys that decide what is trained) that differ from their defaults.

    `config` is NeoXArgs.to_dict() (the sweep) or the copy train.py stores in the checkpoint
    (evaluation): both give the same hash. Defaults stay out so that a key added to the config system
    later does not change the hash of runs trained before it."""
    kept = {name: config[name] for name, default in trained_keys.items() if name in config and config[name] != default}
    if config.get("finetune"):  # its weights started as `load`'s (an extension stage): not a run from scratch
        kept["finetune_from"] = [str(config.get("load")), config.get("iteration")]
    return hashlib.sha256(json.dumps(kept, sort_keys=True, default=str).encode()).hexdigest()

