"""`NeoXArgs`: every config group merged into one typed, validated object."""
import base64
import dataclasses
import difflib
import json
import os
import sys
import typing
import zlib
from dataclasses import dataclass, field
from typing import Optional

from megatron.model.attention_config import AttentionConfig, AttentionConfigError
from megatron.model.positional_embeddings import OptionError, declared_options, lookup, make_options, option_names
from megatron.progress import follow_config

from .errors import NeoXArgsError
from .from_checkpoint import checkpoint_source
from megatron.quoting import quote
from .entry_points import argument_parser, flag_overrides, name_the_cpu_accelerator
from .log_files import start_log_files
from .groups import GROUPS, POS_EMB_ALIASES, POS_EMB_CHOICES, PROBE_TASKS
from .upstream_compat import merge_deepspeed_extra, notice, translate
from .value_checks import check_values, non_finite
from .values import _coerce, _set_nested, _unknown_key_message, parse_overrides  # noqa: F401 (re-exported)
from .yaml_loader import drop_nested, key_path, load_config_files, normalise_key, where_of

OPTIMIZERS = ("Adam", "AdamW")
OPTIMIZER_PARAMS = ("lr", "betas", "eps", "weight_decay")  # what megatron/optimizer.py passes on


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
    def user_keys(cls) -> dict:
        """name -> dataclasses.Field of every key a config file may set."""
        return {f.name: f for f in dataclasses.fields(cls) if not f.metadata.get("derived")}

    @classmethod
    def from_dict(cls, values: dict, sources: Optional[dict] = None, config_files: Optional[dict] = None,
                  world_size: Optional[int] = None) -> "NeoXArgs":
        """Validated args from a {key: value} dict (keys may use '-' or '_')."""
        values, sources, notes = translate(values, sources or {})  # upstream NeoX / KERPLE-fork keys
        known = cls.user_keys()
        values, sources = checkpoint_source(values, sources, known["pos_emb"].default)  # the model of `load`
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
        def fail(path, message):
            raise NeoXArgsError(f"{self.where(path)}: {key_path(path)}: {message}")

        for key in self.config_sources:
            if (path := non_finite(getattr(self, key), key)) is not None:
                fail(path, "must be a finite number, not NaN or infinite (.nan, .inf): no setting means "
                           "\"not a number\" or \"unbounded\" here. Give a number.")

        for key in ("num_layers", "hidden_size", "num_attention_heads", "seq_length",
                    "make_vocab_size_divisible_by", "log_interval", "eval_interval"):
            if getattr(self, key) <= 0:
                fail(key, f"must be a positive integer, got {quote(getattr(self, key))}.")
        if self.train_iters < 0:
            fail("train_iters", f"must be >= 0 (0: evaluate the `load` checkpoint only), got "
                 f"{quote(self.train_iters)}.")
        if self.eval_iters < 0:
            fail("eval_iters", f"must be >= 0, got {quote(self.eval_iters)}.")
        if self.hidden_size % self.num_attention_heads:
            fail("num_attention_heads", f"{quote(self.num_attention_heads)} heads do not divide hidden-size "
                 f"{quote(self.hidden_size)}; choose a head count that divides it.")
        for key in ("hidden_dropout", "attention_dropout", "warmup"):
            if not 0.0 <= getattr(self, key) <= 1.0:
                fail(key, f"must lie in [0, 1], got {quote(getattr(self, key))}.")
        for key in ("model_parallel_size", "pipe_parallel_size"):
            if getattr(self, key) != 1:
                fail(key, f"{quote(getattr(self, key))} is not supported yet: this project trains with data "
                     "parallelism (and ZeRO) only. Set it to 1.")

        canonical = POS_EMB_ALIASES.get(self.pos_emb, self.pos_emb)
        if canonical not in POS_EMB_CHOICES:
            close = difflib.get_close_matches(self.pos_emb, POS_EMB_CHOICES + tuple(POS_EMB_ALIASES), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            fail("pos_emb", f"unknown positional method {quote(self.pos_emb)}.{hint} Choose one of: "
                 + ", ".join(POS_EMB_CHOICES) + ".")
        self.pos_emb = canonical
        self._check_positional_options(fail)

        if self.max_position_embeddings is None:
            self.max_position_embeddings = self.seq_length
        if lookup(self.pos_emb).uses_max_positions and self.max_position_embeddings < self.seq_length:
            fail("max_position_embeddings", f"{quote(self.max_position_embeddings)} is smaller than seq-length "
                 f"{quote(self.seq_length)}, and pos-emb '{self.pos_emb}' cannot embed positions past it. Raise "
                 "max-position-embeddings or use a relative method.")
        if self.seq_length_val is None:
            self.seq_length_val = self.seq_length
        try:
            AttentionConfig.from_args(self)
        except AttentionConfigError as err:
            where = self.config_sources.get(err.key, "the config")
            raise NeoXArgsError(f"{where}: {err}") from None

        self._derive_optimizer(fail)
        self._derive_precision(fail)
        self._derive_batch_sizes(fail)
        if self.lr_decay_iters is None:
            self.lr_decay_iters = self.train_iters

        if self.eval_lengths is None:
            self.eval_lengths = [self.seq_length]
        if not all(isinstance(n, int) and n > 0 for n in self.eval_lengths):
            fail("eval_lengths", f"must be a list of positive integers, got {quote(self.eval_lengths)}.")
        for key in ("eval_chunks", "eval_stride"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                fail(key, f"must be a positive integer (or null for the default), got {quote(getattr(self, key))}.")
        depths = self.probe_depths
        if not depths or not all(isinstance(d, (int, float)) and not isinstance(d, bool) and 0 <= d <= 1
                                 for d in depths):
            fail("probe_depths", f"must be a non-empty list of numbers in [0, 1] (0: the needle opens the "
                 f"prompt, 1: it ends right before the question), got {quote(depths)}.")
        if self.probe_samples < 1:
            fail("probe_samples", f"must be a positive integer, got {quote(self.probe_samples)}.")
        self._check_probe_keys(fail)
        from megatron.evaluation.modes import mode_names  # the registry: one file per mode
        if not self.eval_modes:
            fail("eval_modes", f"is empty; list at least one of {list(mode_names())}.")
        bad_modes = [m for m in self.eval_modes if m not in mode_names()]
        if bad_modes:
            fail("eval_modes", f"unknown mode(s) {quote(bad_modes)}; choose from {list(mode_names())} (each a file "
                 "in megatron/evaluation/modes/).")
        if self.data_path is None and self.train_data_paths is None and self.test_data_paths is None:
            pass  # tools that need data say so when they look for it
        for paths, weights in (("train_data_paths", "train_data_weights"),
                               ("valid_data_paths", "valid_data_weights"),
                               ("test_data_paths", "test_data_weights")):
            p, w = getattr(self, paths), getattr(self, weights)
            if w is not None and (p is None or len(p) != len(w)):
                fail(weights, f"needs one weight per entry of {paths.replace('_', '-')}.")
        check_values(self, fail)

    def _check_probe_keys(self, fail):
        from megatron.evaluation.probes.kv_retrieval import pairs_problem
        if problem := pairs_problem(self.probe_kv_pairs):
            fail("probe_kv_pairs", problem)
        if self.probe_train_kv_pairs is not None:
            if problem := pairs_problem(self.probe_train_kv_pairs):
                fail("probe_train_kv_pairs", problem)
            if self.probe_train_task != "kv-retrieval":
                fail("probe_train_kv_pairs", f"is {quote(self.probe_train_kv_pairs)}, but probe-train-task is "
                     f"{quote(self.probe_train_task)}, not 'kv-retrieval', so no training prompt has pairs. Set "
                     "probe-train-task: kv-retrieval, or remove probe-train-kv-pairs.")
        task, fraction = self.probe_train_task, self.probe_train_fraction
        if not 0 <= fraction <= 1:
            fail("probe_train_fraction", f"must lie in [0, 1] (the fraction of training samples replaced by "
                 f"probe-train-task samples), got {quote(fraction)}.")
        if task is None and fraction > 0:
            fail("probe_train_fraction", f"is {quote(fraction)}, but probe-train-task is not set, so there is nothing "
                 f"to mix in. Set probe-train-task ({' or '.join(PROBE_TASKS)}), or remove probe-train-fraction.")
        if task is not None and fraction == 0:
            fail("probe_train_task", f"is {quote(task)}, but probe-train-fraction is 0, so no training sample would "
                 "be one. Set probe-train-fraction in (0, 1] (e.g. 0.5), or remove probe-train-task.")

    def _check_positional_options(self, fail):
        """Every method's option values by their declared checks, then the chosen method's options
        together (e.g. one mep-weight per mep-kernel)."""
        for option in declared_options():
            value = getattr(self, option.name)
            if option.spec.check and value is not None and (problem := option.spec.check(value)):
                fail(option.name, problem)
            if (option.spec.exclusive and value != option.default
                    and option.name not in option_names(self.pos_emb)):
                owners = [m for m in POS_EMB_CHOICES if option.name in option_names(m)]
                fail(option.name, f"is set, but pos-emb is '{self.pos_emb}', which has no such option (only "
                     f"{', '.join(owners)} does). Remove it, or set pos-emb to {owners[0]}.")
        try:
            make_options(self.pos_emb, {o: getattr(self, o) for o in option_names(self.pos_emb)})
        except OptionError as err:
            fail(err.key, err.message)

    def _derive_optimizer(self, fail):
        opt = self.optimizer
        kind = opt.get("type")
        match = {o.lower(): o for o in OPTIMIZERS}.get(str(kind).lower())
        if match is None:
            fail("optimizer", f"type {quote(kind)} is not supported; use one of {list(OPTIMIZERS)}.")
        params = opt.get("params") or {}
        if not isinstance(params, dict):
            fail("optimizer.params", f"must be a mapping of parameter names to values, e.g. {{lr: 6.0e-4, betas: "
                 f"[0.9, 0.95]}}, got {quote(params)}.")
        params = dict(params)
        if "lr" not in params:
            fail("optimizer", "params.lr is missing: give the peak learning rate, e.g. "
                 "optimizer: {type: Adam, params: {lr: 6.0e-4}}.")
        unknown = sorted(set(params) - set(OPTIMIZER_PARAMS), key=str)
        if unknown:
            fail(f"optimizer.params.{unknown[0]}", f"is not an optimizer parameter here; {match} takes "
                 f"{', '.join(OPTIMIZER_PARAMS)}. Remove it.")
        for name in ("lr", "eps", "weight_decay"):
            if name in params:
                params[name] = _coerce(f"optimizer.params.{name}", params[name], float,
                                       self.where(f"optimizer.params.{name}"))
        self._check_optimizer_params(params, fail)
        self.optimizer = {**opt, "type": match, "params": params}
        self.lr = params["lr"]

    def _check_optimizer_params(self, params, fail):
        """The values torch's Adam refuses when it is built (betas in [0, 1), eps >= 0), refused here
        first; lr > 0 and weight-decay >= 0 are value_checks'."""
        betas = params.get("betas")
        if betas is not None:
            if not (isinstance(betas, list) and len(betas) == 2
                    and all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in betas)):
                fail("optimizer.params.betas", f"must be two numbers [beta1, beta2], e.g. [0.9, 0.95], got "
                     f"{quote(betas)}.")
            for i, beta in enumerate(betas):
                if not 0 <= beta < 1:
                    fail(f"optimizer.params.betas[{i}]", f"must lie in [0, 1) (the decay of Adam's moving "
                         f"averages; torch's Adam refuses anything else), got {quote(beta)}.")
        if params.get("eps", 0.0) < 0:
            fail("optimizer.params.eps", f"must be >= 0 (torch's Adam refuses a negative eps), got "
                 f"{quote(params['eps'])}.")
        if "weight_decay" in params and params["weight_decay"] != self.weight_decay:
            fail("optimizer.params.weight_decay", f"is {quote(params['weight_decay'])}, but the optimizer takes "
                 f"its decay from weight-decay ({quote(self.weight_decay)}), so that norms, biases and kernel "
                 "parameters get none; this one would be ignored. Set weight-decay and remove it here.")

    def _derive_precision(self, fail):
        fp16_on = bool((self.fp16 or {}).get("enabled", False))
        bf16_on = bool((self.bf16 or {}).get("enabled", False))
        if fp16_on and bf16_on:
            fail("fp16", "fp16 and bf16 are both enabled; enable one of them.")
        derived = "fp16" if fp16_on else "bf16" if bf16_on else "fp32"
        if self.precision is None:
            self.precision = derived
        elif self.precision != derived and (fp16_on or bf16_on):
            fail("precision", f"is '{self.precision}' but the {derived} dict is enabled; make them agree.")
        elif self.precision == "fp16" and self.fp16 is None:
            self.fp16 = {"enabled": True}
        elif self.precision == "bf16" and self.bf16 is None:
            self.bf16 = {"enabled": True}

    def _derive_batch_sizes(self, fail):
        """train_batch_size = micro x grad_accum x data-parallel size, given any two (or micro alone)."""
        dp = self.world_size
        glob, micro, gas = (self.train_batch_size, self.train_micro_batch_size_per_gpu,
                            self.gradient_accumulation_steps)
        for key, value in (("train_batch_size", glob), ("train_micro_batch_size_per_gpu", micro),
                           ("gradient_accumulation_steps", gas)):
            if value is not None and value <= 0:
                fail(key, f"must be a positive integer, got {quote(value)}.")
        if glob is None and micro is None:
            fail("train_micro_batch_size_per_gpu", "no batch size is set: give two of train-batch-size, "
                 "train-micro-batch-size-per-gpu and gradient-accumulation-steps (or the micro size alone).")
        if micro is None:
            gas = gas or 1
            if glob % (gas * dp):
                fail("train_batch_size", f"{quote(glob)} is not divisible by gradient-accumulation-steps {quote(gas)} "
                     f"x data-parallel size {dp}.")
            micro = glob // (gas * dp)
        elif glob is None:
            gas = gas or 1
            glob = micro * gas * dp
        elif gas is None:
            if glob % (micro * dp):
                fail("train_batch_size", f"{quote(glob)} is not divisible by micro batch {quote(micro)} x "
                     f"data-parallel size {dp}.")
            gas = glob // (micro * dp)
        elif glob != micro * gas * dp:
            fail("train_batch_size", f"{quote(glob)} != micro batch {quote(micro)} x gradient-accumulation-steps "
                 f"{quote(gas)} x data-parallel size {dp} = {micro * gas * dp}. Give only two of the three.")
        self.train_batch_size, self.train_micro_batch_size_per_gpu = glob, micro
        self.gradient_accumulation_steps = gas

    # ---------------------------------------------------------------- views
    def to_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def user_values(self) -> dict:
        """The keys a config file set, as given (what deepy.py sends to every rank)."""
        return {k: getattr(self, k) for k in self.config_sources}

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
        if self.bf16 is not None:
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
    print it N times); the other ranks exit with the same status."""
    name_the_cpu_accelerator()  # before anything imports DeepSpeed
    try:
        return main()
    except NeoXArgsError as err:
        if int(os.environ.get("RANK", 0)) == 0:
            print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
