"""The checks of each config group, one function per group, in the order NeoXArgs runs them
(CHECKS): each fills in its group's derived values and refuses its mistakes with `fail(key or key
path, message)`, which raises the NeoXArgsError naming the file and line. Keys an owner declares
(positional methods, evaluation modes, the probe training mix) are checked by the owner's
declarations; what no declaration says is written here."""
import difflib

from megatron.evaluation.modes import mode_names, mode_options
from megatron.probes import TrainOptions as ProbeTrainOptions
from megatron.model.attention.config import AttentionConfigError
from megatron.model.head_split import model_sequence_parallel_problem
from megatron.model.layer_pattern import LayerPatternError, pattern_problem
from megatron.model.positional_embeddings.dape import dape_problem
from megatron.model.positional_embeddings.temperature import temperature_problem
from megatron.model.positional_embeddings import OptionError, declared_options, lookup, make_options, option_names
from megatron.length_schedule import LengthScheduleError, parse_schedule
from megatron.quoting import quote

from .errors import NeoXArgsError
from .to_length_schedule import length_schedule_of
from .groups import POS_EMB_ALIASES, POS_EMB_CHOICES
from .owned_options import check_owned
from .to_model import attention_config, layers_config
from .value_checks import check_values, non_finite, past_float32
from .values import _coerce

OPTIMIZERS = ("Adam", "AdamW")
OPTIMIZER_PARAMS = ("lr", "betas", "eps", "weight_decay")  # what megatron/training/optimizer.py passes on


def check_finite(args, fail):
    for key in args.config_sources:
        if (path := non_finite(getattr(args, key), key)) is not None:
            fail(path, "must be a finite number, not NaN or infinite (.nan, .inf): no setting means "
                       "\"not a number\" or \"unbounded\" here. Give a number.")
        if (path := past_float32(getattr(args, key), key)) is not None:
            fail(path, "is beyond what float32 holds (about 3.4e38): the model's parameters are float32 or "
                       "narrower, so no setting is meaningful there. Give a number of a sensible size.")


def check_model(args, fail):
    for key in ("num_layers", "hidden_size", "num_attention_heads", "seq_length", "make_vocab_size_divisible_by"):
        if getattr(args, key) <= 0:
            fail(key, f"must be a positive integer, got {quote(getattr(args, key))}.")
    if args.hidden_size % args.num_attention_heads:
        fail("num_attention_heads", f"{quote(args.num_attention_heads)} heads do not divide hidden-size "
             f"{quote(args.hidden_size)}; choose a head count that divides it.")
    for key in ("hidden_dropout", "attention_dropout"):
        if not 0.0 <= getattr(args, key) <= 1.0:
            fail(key, f"must lie in [0, 1], got {quote(getattr(args, key))}.")


def check_training(args, fail):
    for key in ("log_interval", "eval_interval"):
        if getattr(args, key) <= 0:
            fail(key, f"must be a positive integer, got {quote(getattr(args, key))}.")
    if args.train_iters < 0:
        fail("train_iters", f"must be >= 0 (0: evaluate the `load` checkpoint only), got "
             f"{quote(args.train_iters)}.")
    if args.eval_iters < 0:
        fail("eval_iters", f"must be >= 0, got {quote(args.eval_iters)}.")
    for key in ("model_parallel_size", "pipe_parallel_size"):
        if getattr(args, key) != 1:
            fail(key, f"{quote(getattr(args, key))} is not supported yet: this project trains with data "
                 "parallelism (and ZeRO) only. Set it to 1.")


def check_pose(args, fail):
    """pose-target-length and pose-chunks (megatron/training/pose_positions.py)."""
    target, chunks = args.pose_target_length, args.pose_chunks
    if target is None:
        if "pose_chunks" in args.config_sources:
            fail("pose_chunks", f"is {quote(chunks)}, but pose-target-length is null, so there are no PoSE "
                 "positions to cut into chunks. Set pose-target-length (e.g. 4 x seq-length) or remove pose-chunks.")
        return
    if isinstance(target, bool) or target <= args.seq_length:
        fail("pose_target_length", f"is {quote(target)}; it must be a target window T > seq-length "
             f"{quote(args.seq_length)} (the skips move the chunks within it; at T = seq-length there is no room to "
             "skip), or null for 0..L-1.")
    if isinstance(chunks, bool) or not 2 <= chunks <= args.seq_length:
        fail("pose_chunks", f"is {quote(chunks)}; PoSE cuts each sequence into 2 or more chunks (the paper uses "
             f"2), at most seq-length {quote(args.seq_length)}.")
    if args.random_positions is not None:
        fail("pose_target_length", f"is set together with random-positions {quote(args.random_positions)}: both "
             "choose the training positions. Use one of them.")
    if args.reset_position_ids:
        fail("pose_target_length", "is set together with reset-position-ids: both choose the training positions "
             "(PoSE skips within a sequence, reset-position-ids restarts at each document). Use one of them; "
             "reset-attention-mask alone (documents masked, positions running) works with PoSE.")
    if lookup(args.pos_emb).uses_max_positions and target > (args.max_position_embeddings or args.seq_length):
        fail("pose_target_length", f"is {quote(target)}, past max-position-embeddings "
             f"{quote(args.max_position_embeddings or args.seq_length)}: pos-emb '{args.pos_emb}' has no row for "
             "the positions it would skip to. Lower it or raise max-position-embeddings.")


def check_length_schedule(args, fail):
    """`length-schedule` (megatron/length_schedule.py)."""
    if args.length_schedule is None:
        return
    try:
        parse_schedule(args.length_schedule, args.seq_length, len(args.train_data_paths or []))
    except LengthScheduleError as err:
        fail(err.path, err.message)


def check_positional(args, fail):
    """`pos-emb` (an alias becomes its name), every method's option values by their declared checks,
    then the chosen method's options together (e.g. one mep-weight per mep-kernel), then the positions
    a position table can hold."""
    canonical = POS_EMB_ALIASES.get(args.pos_emb, args.pos_emb)
    if canonical not in POS_EMB_CHOICES:
        close = difflib.get_close_matches(args.pos_emb, POS_EMB_CHOICES + tuple(POS_EMB_ALIASES), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        fail("pos_emb", f"unknown positional method {quote(args.pos_emb)}.{hint} Choose one of: "
             + ", ".join(POS_EMB_CHOICES) + ".")
    args.pos_emb = canonical
    for option in declared_options():
        value = getattr(args, option.name)
        if option.spec.check and value is not None and (problem := option.spec.check(value)):
            fail(option.name, problem)
        if (option.spec.exclusive and value != option.default
                and option.name not in option_names(args.pos_emb)):
            owners = [m for m in POS_EMB_CHOICES if option.name in option_names(m)]
            which = owners[0] + " does" if len(owners) == 1 else f"{', '.join(owners[:-1])} and {owners[-1]} do"
            fail(option.name, f"is set, but pos-emb is '{args.pos_emb}', which has no such option (only {which}). "
                 f"Remove it, or set pos-emb to {owners[0]}.")
    try:
        make_options(args.pos_emb, {o: getattr(args, o) for o in option_names(args.pos_emb)})
    except OptionError as err:
        fail(err.key, err.message)

    if args.max_position_embeddings is None:
        args.max_position_embeddings = args.seq_length
    if lookup(args.pos_emb).uses_max_positions and args.max_position_embeddings < args.seq_length:
        fail("max_position_embeddings", f"{quote(args.max_position_embeddings)} is smaller than seq-length "
             f"{quote(args.seq_length)}, and pos-emb '{args.pos_emb}' cannot embed positions past it. Raise "
             "max-position-embeddings or use a relative method.")
    if args.random_positions is not None:
        if isinstance(args.random_positions, bool) or args.random_positions < args.seq_length:
            fail("random_positions", f"is {quote(args.random_positions)}; it must be a number of positions N >= "
                 f"seq-length {quote(args.seq_length)} to draw each micro-batch's positions from (e.g. 4 x "
                 "seq-length), or null for 0..L-1.")
        if lookup(args.pos_emb).uses_max_positions and args.random_positions > args.max_position_embeddings:
            fail("random_positions", f"is {quote(args.random_positions)}, past max-position-embeddings "
                 f"{quote(args.max_position_embeddings)}: pos-emb '{args.pos_emb}' has no row for the positions "
                 "it would draw. Lower it or raise max-position-embeddings.")
    check_pose(args, fail)
    if args.reset_position_ids and not args.reset_attention_mask:
        fail("reset_position_ids", "is set without reset-attention-mask: a token would attend to the earlier "
             "document's keys, whose positions now lie after its own (a negative distance, which no "
             "positional method defines). Set reset-attention-mask: true as well, or leave positions running.")
    if args.reset_position_ids and args.random_positions is not None:
        fail("reset_position_ids", f"is set together with random-positions {quote(args.random_positions)}: "
             "both choose the training positions. Use one of them.")
    if (problem := temperature_problem(args.attention_temperature)) is not None:
        fail("attention_temperature", problem)
    if (problem := dape_problem(args.dape)) is not None:
        fail("dape", problem)
    for key in ("attention_temperature", "dape"):
        if getattr(args, key) is not None and "score_rewrite" in lookup(args.pos_emb).channels:
            fail(key, f"cannot wrap pos-emb '{lookup(args.pos_emb).name}', which rewrites the score matrix itself "
                      "(its own reading of the scores would change). Remove it, or choose a bias method.")
    if args.layer_pattern is not None:
        if (problem := pattern_problem(args.layer_pattern)) is not None:
            fail("layer_pattern", problem)
        try:
            layers_config(args)  # reads the pattern into the model's typed layers
        except AttentionConfigError:
            return  # check_attention names it
        except LayerPatternError as err:
            fail(err.key, str(err))


def check_attention(args, fail):
    try:
        attention_config(args)
    except AttentionConfigError as err:
        where = args.config_sources.get(err.key, "the config")
        raise NeoXArgsError(f"{where}: {err}") from None


def check_optimizer(args, fail):
    opt = args.optimizer
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
                                   args.where(f"optimizer.params.{name}"))
    _check_optimizer_params(args, params, fail)
    args.optimizer = {**opt, "type": match, "params": params}
    args.lr = params["lr"]
    if not 0.0 <= args.warmup <= 1.0:
        fail("warmup", f"must lie in [0, 1], got {quote(args.warmup)}.")
    if args.lr_decay_iters is None:
        args.lr_decay_iters = args.train_iters


def _check_optimizer_params(args, params, fail):
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
    if "weight_decay" in params and params["weight_decay"] != args.weight_decay:
        fail("optimizer.params.weight_decay", f"is {quote(params['weight_decay'])}, but the optimizer takes "
             f"its decay from weight-decay ({quote(args.weight_decay)}), so that norms, biases and kernel "
             "parameters get none; this one would be ignored. Set weight-decay and remove it here.")


def check_precision(args, fail):
    fp16_on = bool((args.fp16 or {}).get("enabled", False))
    bf16_on = bool((args.bf16 or {}).get("enabled", False))
    if fp16_on and bf16_on:
        fail("fp16", "fp16 and bf16 are both enabled; enable one of them.")
    derived = "fp16" if fp16_on else "bf16" if bf16_on else "fp32"
    if args.precision is None:
        args.precision = derived
    elif args.precision != derived and (fp16_on or bf16_on):
        fail("precision", f"is '{args.precision}' but the {derived} dict is enabled; make them agree.")
    elif args.precision == "fp16" and args.fp16 is None:
        args.fp16 = {"enabled": True}
    elif args.precision == "bf16" and args.bf16 is None:
        args.bf16 = {"enabled": True}
    if "bf16_weights" in args.config_sources and args.precision != "bf16":
        fail("bf16_weights", f"chooses how bf16 trains, but precision is {args.precision}; remove it or set "
             "precision: bf16.")


def check_sequence_parallel(args, fail):
    """sequence-parallel-size P: it divides the ranks, the heads and the lengths, and every layer's method
    keeps its heads apart (megatron/model/head_split.py)."""
    size = args.sequence_parallel_size
    if isinstance(size, bool) or not isinstance(size, int) or size < 1:
        fail("sequence_parallel_size", f"must be a positive integer (1: off), got {quote(size)}.")
    if size == 1:
        return
    if args.world_size % size:
        fail("sequence_parallel_size", f"{size} does not divide the {args.world_size} rank(s) launched: each sequence "
             f"is split over {size} ranks, so the ranks are data-parallel size x {size}. Launch with deepy.py and "
             f"num-gpus a multiple of {size} (e.g. `--set num-gpus={size}`: one sequence over {size} processes).")
    for key in ("num_attention_heads", "seq_length", "seq_length_val"):
        if getattr(args, key) % size:
            what = "heads (each rank attends with heads/P of them)" if key == "num_attention_heads" else \
                "tokens (each rank holds length/P of every sequence)"
            fail("sequence_parallel_size", f"{size} does not divide {key.replace('_', '-')} {getattr(args, key)}: "
                 f"it splits the {what}. Choose a sequence-parallel-size that divides it.")
    if args.random_positions is not None:
        fail("sequence_parallel_size", f"{size} is set together with random-positions: each rank would draw its "
             "own positions for its shard, not one draw for the whole sequence. Use one of them.")
    if args.pose_target_length is not None:
        fail("sequence_parallel_size", f"{size} is set together with pose-target-length: each rank would draw its "
             "own PoSE positions for its shard, not one draw for the whole sequence. Use one of them.")
    if args.length_schedule is not None and any(
            stage.seq_length is not None for stage in length_schedule_of(args).stages):
        fail("sequence_parallel_size", f"{size} is set together with a length-schedule that shortens the "
             "sequences: each rank holds a slice of a sample, not whole fragments of it. Schedule only the window "
             "(which works on every path), or train on one rank per sequence.")
    if (problem := model_sequence_parallel_problem(layers_config(args))) is not None:
        fail("sequence_parallel_size", problem)


def check_batch_sizes(args, fail):
    """train_batch_size = micro x grad_accum x data-parallel size, given any two (or micro alone); the
    data-parallel size is the ranks over sequence-parallel-size (the ranks that share a sequence are one)."""
    dp = args.world_size // args.sequence_parallel_size
    glob, micro, gas = (args.train_batch_size, args.train_micro_batch_size_per_gpu,
                        args.gradient_accumulation_steps)
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
    args.train_batch_size, args.train_micro_batch_size_per_gpu = glob, micro
    args.gradient_accumulation_steps = gas


def check_evaluation(args, fail):
    """The evaluation keys of every run, then each mode's own options by its declarations."""
    if args.eval_lengths is None:
        args.eval_lengths = [args.seq_length]
    if not all(isinstance(n, int) and n > 0 for n in args.eval_lengths):
        fail("eval_lengths", f"must be a list of positive integers, got {quote(args.eval_lengths)}.")
    if [n for n in args.eval_lengths if n % args.sequence_parallel_size]:
        fail("eval_lengths", f"{[n for n in args.eval_lengths if n % args.sequence_parallel_size]} do not divide by "
             f"sequence-parallel-size {args.sequence_parallel_size}, which splits every scored window into that many "
             "equal shards. Choose lengths that are multiples of it.")
    for key in ("eval_chunks", "eval_stride"):
        if getattr(args, key) is not None and getattr(args, key) < 1:
            fail(key, f"must be a positive integer (or null for the default), got {quote(getattr(args, key))}.")
    for _, options in mode_options():
        if options is not None:
            check_owned(args, options, fail)
    if not args.eval_modes:
        fail("eval_modes", f"is empty; list at least one of {list(mode_names())}.")
    bad_modes = [m for m in args.eval_modes if m not in mode_names()]
    if bad_modes:
        fail("eval_modes", f"unknown mode(s) {quote(bad_modes)}; choose from {list(mode_names())} (each a file "
             "in megatron/evaluation/modes/).")
    if args.eval_documents == "within" and "sliding" in args.eval_modes:
        fail("eval_documents", "is 'within', but the `sliding` mode gives each chunk context from before its "
             "start, which crosses into the previous document; use eval-documents: cross with `sliding`, or "
             "score `nonoverlap` within documents.")


def check_data(args, fail):
    if args.seq_length_val is None:
        args.seq_length_val = args.seq_length
    for paths, weights in (("train_data_paths", "train_data_weights"),
                           ("valid_data_paths", "valid_data_weights"),
                           ("test_data_paths", "test_data_weights")):
        p, w = getattr(args, paths), getattr(args, weights)
        if w is not None and (p is None or len(p) != len(w)):
            fail(weights, f"needs one weight per entry of {paths.replace('_', '-')}.")
    check_owned(args, ProbeTrainOptions, fail)


# In this order: every number finite first, so the range checks see real numbers; the model's keys
# before attention's (which reads max-position-embeddings); value_checks last, once lr is derived.
CHECKS = (check_finite, check_model, check_training, check_length_schedule, check_positional, check_data, check_attention,
          check_sequence_parallel, check_optimizer, check_precision, check_batch_sizes, check_evaluation, check_values)
