"""`NeoXArgs`: every config group merged into one typed, validated object."""
import base64
import dataclasses
import json
import os
import sys
import typing
import zlib
from dataclasses import dataclass, field
from typing import Optional

from megatron.progress import follow_config

from .entry_points import argument_parser, flag_overrides, name_the_cpu_accelerator
from .errors import NeoXArgsError
from .from_checkpoint import checkpoint_source, drop_write_keys, model_config_only
from .group_checks import CHECKS
from .groups import GROUPS, EvaluationArgs, LauncherArgs, LoggingArgs
from .log_files import start_log_files
from .resolved import resolved_yaml
from .run_folder import results_beside_checkpoint, run_folder_source
from .to_checkpoint import checkpoint_run, inference_run
from .to_evaluation import evaluation_run, lm_eval_tasks, wandb_run
from .to_preflight import preflight_run
from .to_generation import generation_run
from .to_tokenizer import tokenizer_run
from .to_model import model_config
from .upstream_compat import merge_deepspeed_extra, notice, translate
from .values import _coerce, _set_nested, _unknown_key_message, parse_overrides  # noqa: F401 (re-exported)
from .yaml_loader import drop_nested, key_path, load_config_files, normalise_key, where_of


@dataclass
class NeoXArgs(*reversed(GROUPS)):
    # Derived at load time (not YAML keys).
    lr: Optional[float] = field(default=None, metadata={"derived": True})
    world_size: int = field(default=1, metadata={"derived": True})
    rank: int = field(default=0, metadata={"derived": True})
    local_rank: int = field(default=0, metadata={"derived": True})
    config_files: dict = field(default_factory=dict, metadata={"derived": True})
    config_sources: dict = field(default_factory=dict, metadata={"derived": True})
    nested_sources: dict = field(default_factory=dict, metadata={"derived": True})  # 'optimizer.params.lr': file:line
    upstream_notes: list = field(default_factory=list, metadata={"derived": True})  # upstream_compat.Note

    # ---------------------------------------------------------------- construction
    @classmethod
    def trained_keys(cls) -> dict:
        """{key: default} of every config key that decides what is trained: the keys a run's config hash
        (megatron/evaluation/identity.py, config_hash) is computed over."""
        return {name: f.default_factory() if callable(f.default_factory) else f.default
                for name, f in cls.user_keys().items() if name not in _UNHASHED_KEYS}

    @classmethod
    def user_keys(cls) -> dict:
        """name -> dataclasses.Field of every key a config file may set."""
        return {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("derived")}

    @classmethod
    def from_dict(cls, values: dict, sources: Optional[dict] = None, config_files: Optional[dict] = None,
                  world_size: Optional[int] = None) -> "NeoXArgs":
        """Validated args from a {key: value} dict (keys may use '-' or '_')."""
        known = cls.user_keys()
        values, sources, notes = translate(values, sources or {}, known)  # upstream NeoX / KERPLE-fork keys
        values, sources = run_folder_source(values, sources)  # save, load, ... under run-dir
        values, sources = checkpoint_source(values, sources, known["pos_emb"].default)  # the model of `load`
        values, sources = results_beside_checkpoint(values, sources)
        hints = typing.get_type_hints(cls)
        kwargs = {}
        for raw_key, value in values.items():
            key = normalise_key(raw_key)
            where = sources.get(key, "the given config")
            if key not in known:
                raise NeoXArgsError(_unknown_key_message(raw_key, where, known))
            kwargs[key] = _coerce(key, value, hints[key], where)
        args = cls(**kwargs)
        args.config_sources = {k: sources.get(k, "the given config") for k in kwargs}
        args.nested_sources = {k: v for k, v in sources.items() if k.split(".")[0].split("[")[0] in kwargs
                               and k not in kwargs}
        args.config_files = dict(config_files or {})
        args.upstream_notes = notes
        if world_size is None:
            world_size = int(os.environ.get("WORLD_SIZE", 1))
        args.world_size = world_size
        args.rank = int(os.environ.get("RANK", 0))
        args.local_rank = int(os.environ.get("LOCAL_RANK", 0))
        args._derive_and_validate()
        return args

    @classmethod
    def from_ymls(cls, paths, overrides: Optional[dict] = None, world_size: Optional[int] = None):
        values, sources, texts = load_config_files(paths)
        if note := drop_write_keys(paths, values, sources, overrides or {}):
            print(note, file=sys.stderr, flush=True)
        spelling = {normalise_key(k): k for k in values}  # keep the user's spelling for messages
        for key, value in (overrides or {}).items():
            top, *path = normalise_key(key).split(".")
            current = values.pop(spelling.get(top, top), None)
            values[top] = _set_nested(current, path, value, key) if path else value
            sources[top] = "command line"  # and the nested lines of what it replaced go
            drop_nested(sources, ".".join([top, *path]))
            if path:
                sources[".".join([top, *path])] = "command line"
        return cls.from_dict(values, sources, texts, world_size)

    @classmethod
    def consume_args(cls, argv=None) -> "NeoXArgs":
        """What train.py / evaluate.py call: the config deepy.py sent (`--megatron_config` or, on one machine,
        `--megatron_config_file`), or YAML
        files named directly (`python train.py configs/tiny.yml --set train-iters=10`). The help is
        that of the script running (entry_points.py)."""
        script = sys.modules.get("__main__")
        name = os.path.basename(getattr(script, "__file__", None) or "")
        parser = argument_parser(name, getattr(script, "__doc__", None))
        ns = parser.parse_args(argv)
        if ns.megatron_config_file:  # deepy.py on one machine: the config may exceed a command-line argument
            with open(ns.megatron_config_file) as f:
                ns.megatron_config = f.read()
        if ns.megatron_config:
            payload = decode_config(ns.megatron_config)
            args = cls.from_dict(payload["values"], payload["sources"], payload["config_files"])
            args.start_process()
            return args
        overrides = parse_overrides(ns.set)
        if not ns.configs and "load" not in {normalise_key(k) for k in overrides}:
            parser.error("give at least one YAML config file (e.g. configs/tiny.yml), or a checkpoint with "
                         "--set load=DIR (its model and data come from the checkpoint)")
        for key, value in flag_overrides(name, ns).items():
            if key in overrides:
                raise NeoXArgsError(f"command line: {key.replace('_', '-')} is given both by its own flag and by "
                                    f"--set; give it once.")
            overrides[key] = value
        args = cls.from_ymls(ns.configs, overrides)
        args.start_process()
        if args.upstream_notice() and args.rank == 0:  # deepy.py printed it already when it launched us
            print(args.upstream_notice(), file=sys.stderr, flush=True)
        return args

    def start_process(self) -> None:
        """What an entry point's process takes from its config before anything else: its log files
        (`log-dir`) and whether it shows progress displays (`progress`)."""
        start_log_files(self)
        follow_config(self.progress)

    # ---------------------------------------------------------------- derivation
    def where(self, path: str) -> str:
        """'file:line' that set a key or a key path inside one (`optimizer.params.lr`)."""
        return where_of({**self.nested_sources, **self.config_sources}, path)

    def _derive_and_validate(self):
        """Each group's checks (group_checks.py), which also fill in the derived values; then the model, once."""
        def fail(path, message):
            raise NeoXArgsError(f"{self.where(path)}: {key_path(path)}: {message}")

        for check in CHECKS:
            check(self, fail)
        # What everything below the entry points builds from (megatron/model/model_config.py). The embedding rows
        # are the tokenizer's (built later, by each rank): dataclasses.replace(model, padded_vocab_size=rows).
        self.model = model_config(self, None)

    # ---------------------------------------------------------------- views
    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def user_values(self) -> dict:
        """The keys a config file set, as given (what deepy.py sends to every rank)."""
        return {k: getattr(self, k) for k in self.config_sources}

    def resolved_yaml(self) -> str:
        """The merged config as one loadable YAML file (resolved.py): what a checkpoint keeps beside its weights."""
        return resolved_yaml(self)

    def checkpoint_run(self):
        """The keys training's saves and resume read (megatron/checkpoint/run_keys.py's CheckpointRun), as the
        run is now: what a save writes of the config."""
        return checkpoint_run(self)

    def inference_run(self):
        """The model and the keys that loading a trained model reads (run_keys.py's InferenceRun)."""
        return inference_run(self)

    def evaluation_run(self):
        """What one evaluation of the `load` checkpoint reads (megatron/evaluation/run_keys.py's EvaluationRun)."""
        return evaluation_run(self)

    def lm_eval_tasks(self):
        """eval.py's lm-eval keys (run_keys.py's LmEvalTasks)."""
        return lm_eval_tasks(self)

    def wandb_run(self):
        """Where the run's W&B numbers go (megatron/run/wandb_run.py's WandbRun)."""
        return wandb_run(self)

    def generation_run(self):
        """The keys generate.py's run reads (megatron/text_generation/run_keys.py's GenerationRun)."""
        return generation_run(self)

    def preflight_run(self):
        """The keys the start-up checks read (megatron/run/run_keys.py's PreflightRun), as the run is now."""
        return preflight_run(self)

    def data_run(self):
        """The keys the data package reads (megatron/data/run_keys.py's DataRun), as the run is now: its loaders'
        share is this rank's, so build it after join_process_group."""
        from .to_data import data_run  # megatron.data imports megatron-core: not before a command line is read
        return data_run(self)

    def tokenizer_run(self):
        """The keys building the run's tokenizer reads (megatron/tokenizer/run_keys.py's TokenizerRun)."""
        return tokenizer_run(self)

    def training_run(self):
        """What train.py's pretrain() reads (megatron/training/run_keys.py's TrainingRun), as the run is now: build it
        after join_process_group, so that the data's share and the config a save stores are this rank's."""
        from .to_training import training_run  # the data's records import megatron-core: not before a command line
        return training_run(self)

    def join_process_group(self) -> None:
        """Start this rank (megatron/run/initialize.py: the process group the launcher describes, or a one-process
        group when run directly with `python train.py`; its device; every generator seeded with `seed`), and learn
        its rank, world size and local rank, which the records built after it carry."""
        from megatron.run.initialize import join_process_group  # imports torch and DeepSpeed
        self.rank, self.world_size, self.local_rank = join_process_group(self.seed)

    def model_only_from(self) -> str | None:
        """The checkpoint folder whose model-states file alone gave this run its model (the checkpoint keeps no
        merged config, so nothing else of its run is known), or None."""
        return model_config_only(self.config_sources)

    def deepspeed_config(self) -> dict:
        """The DeepSpeed JSON, derived from the same config."""
        params = dict(self.optimizer["params"])
        params.setdefault("weight_decay", self.weight_decay)
        config = {
            "train_batch_size": self.train_batch_size,
            "train_micro_batch_size_per_gpu": self.train_micro_batch_size_per_gpu,
            "gradient_accumulation_steps": self.gradient_accumulation_steps,
            "optimizer": {"type": self.optimizer["type"], "params": params},
            "gradient_clipping": self.gradient_clipping,
            "zero_optimization": self.zero_optimization,
            "steps_per_print": self.steps_per_print,
            "wall_clock_breakdown": self.wall_clock_breakdown,
        }
        if self.fp16 is not None:
            config["fp16"] = self.fp16
        if self.precision == "bf16" and self.bf16_weights == "fp32":
            config["torch_autocast"] = {"enabled": True, "dtype": "bfloat16"}
        elif self.bf16 is not None:
            config["bf16"] = self.bf16
        return merge_deepspeed_extra(config, self.deepspeed_extra_args,
                                     self.config_sources.get("deepspeed_extra_args", "the config"))

    def upstream_notice(self) -> str | None:
        """The one start-up note on upstream keys that were translated or have no effect."""
        return notice(self.upstream_notes)

    def describe(self) -> str:
        """The merged config, one key a line, with the file (and line) that set each non-default value."""
        rows = []
        for key in sorted(self.user_keys()):
            value = getattr(self, key)
            source = self.config_sources.get(key)
            if source is None:
                default = self.user_keys()[key]
                default = default.default_factory() if callable(default.default_factory) else default.default
                source = "default" if value == default else "derived"
            rows.append((key, json.dumps(value, default=str), source))
        width = max(len(r[0]) for r in rows)
        vwidth = min(max(len(r[1]) for r in rows), 60)
        return "\n".join(f"{k:<{width}}  {v:<{vwidth}}  # {s}" for k, v, s in rows)


# A run's config hash (megatron/evaluation/identity.py) leaves out the settings that do not change what
# was trained: evaluation, logging and launcher keys, the seed (the seeds of one configuration share a
# hash) and where things are.
_UNHASHED_KEYS = {"seed", "run_dir", "load", "save", "iteration", "finetune", "num_workers", "data_cache_path", "compile_blocks"} | {
    f.name for group in (EvaluationArgs, LoggingArgs, LauncherArgs) for f in dataclasses.fields(group)}


def encode_config(args: NeoXArgs) -> str:
    """The config as deepy.py hands it to every rank: compressed JSON in base64 (upstream NeoX sends
    plain base64 JSON; compressing keeps the command line short with the config files inside)."""
    payload = {"values": args.user_values(), "sources": {**args.nested_sources, **args.config_sources},
               "config_files": args.config_files}
    return base64.urlsafe_b64encode(zlib.compress(json.dumps(payload).encode(), 9)).decode()


def decode_config(text: str) -> dict:
    return json.loads(zlib.decompress(base64.urlsafe_b64decode(text.encode())).decode())


def run_cli(main):
    """Run an entry point, printing a config mistake as one paragraph instead of a traceback: on rank 0
    only, since every rank reads the same config and raises the same error (a launch of N ranks would
    print it N times); the other ranks exit with the same status. A script's own `main` (the process's entry
    point) ends the process when it returns, without Python's teardown (megatron/run/process_exit.py)."""
    name_the_cpu_accelerator()  # before anything imports DeepSpeed
    try:
        from megatron.neox_arguments.inductor_dir import check_inductor_dir_writable
        check_inductor_dir_writable()  # before megatron-core imports torch's compiler, which makes the folder
        code = main()
    except NeoXArgsError as err:
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    if getattr(main, "__module__", None) == "__main__":  # this process runs the entry point: end it now
        from megatron.run.process_exit import leave
        leave(code)
    return code
