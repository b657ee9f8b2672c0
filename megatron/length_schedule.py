"""`length-schedule`: the training sequence length and the attention window as functions of the step.

A stage holds from its `start-step` (steps done before it) until the next stage's. A fixed stage sets
`seq-length` and/or `window`; a `ramp: linear` stage moves from its first value to its second over `steps`
steps and then holds the second. What a stage leaves out is the run's own: the whole seq-length, the
configured windows.

Sequence length is token-preserving (OLMo-core's sequence-length scheduler, not GPT-NeoX's truncating
`curriculum_seqlen`): a stage's length L divides the run's seq-length S, and each sample of S tokens is split
into S/L sequences of L tokens (megatron/data/fragments.py), so a micro-batch of b samples becomes b*S/L
sequences and every token is still trained on, with the label it had. Positions restart at 0 in each fragment
(and, with reset-position-ids, the document a fragment starts inside restarts at 0 there): a fragment is a
sequence of its own, for rotary and bias methods alike. A ramp's length is the largest divisor of S at or
below its line, so a ramp over powers of two moves in powers of two.

A window stage caps every layer's window at W (the SkyLadder recipe: the visible context grows while the
sequences stay whole); the mask is the model's own window mask. Validation and evaluation keep the
configured windows.

A stage's `train-data-weights` is the blend of train-data-paths from its start step on (ProLong's long/short
mix, an annealing mix); a stage without them draws with the run's train-data-weights, not the previous
stage's. A mix does not ramp: megatron-core blends with fixed weights, so under a ramp the stage's weights hold
for the whole stage (several stages of fixed mixes step a mix). megatron/data/staged_mix.py builds the stream.
The schedule depends only on the step, so a resumed run is in the stage the step says."""
from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

from megatron.quoting import quote

STAGE_KEYS = ("start_step", "seq_length", "window", "train_data_weights", "ramp", "steps")
EXTENSION_KEYS = ("rotary_emb_base", "rotary_scaling")  # a fine-tune's, not a stage's (docs/length-schedules.md)
RAMPS = ("linear",)


class LengthScheduleError(ValueError):
    """A mistake in `length-schedule`: `path` is the key path (length_schedule[1].window), `message` the why."""

    def __init__(self, path: str, message: str):
        super().__init__(message)
        self.path, self.message = path, message


@dataclass(frozen=True)
class Stage:
    start_step: int
    seq_length: int | tuple[int, int] | None  # None: the run's seq-length; a pair under a ramp
    window: int | tuple[int, int] | None      # None: the configured windows; a pair under a ramp
    ramp: str | None = None
    steps: int | None = None
    train_data_weights: tuple[float, ...] | None = None  # None: the run's train-data-weights (held under a ramp)


@dataclass(frozen=True)
class LengthAt:
    """What one step trains with."""
    stage: int             # the stage's index in the list
    seq_length: int        # the length of each training sequence
    window: int | None     # the cap on every layer's window (None: the configured windows)
    samples_split: int     # sequences each sample becomes (seq-length / this seq_length)
    # The weights of train-data-paths the step's samples are drawn with, where a stage of the schedule sets a
    # mix (a stage without one: the run's train-data-weights); None where no stage does (the run's one blend).
    data_weights: tuple[float, ...] | None = None

    def describe(self) -> str:
        window = "configured" if self.window is None else str(self.window)
        mix = "" if self.data_weights is None else f", train-data-weights {weights_text(self.data_weights)}"
        return f"stage {self.stage}: seq-length {self.seq_length}, window {window}{mix}"

    def record(self) -> dict:
        """What a checkpoint keeps: plain data."""
        mix = {} if self.data_weights is None else {"train_data_weights": list(self.data_weights)}
        return {"stage": self.stage, "seq_length": self.seq_length, "window": self.window, **mix}

    @contextlib.contextmanager
    def windows_applied(self, model):
        """The model's attention windows (GPTModel.windows, read by each forward) capped at this window inside
        the block, the configured ones after it."""
        configured = list(model.windows)
        if self.window is not None:
            model.windows = [self.window if w is None else min(w, self.window) for w in configured]
        try:
            yield
        finally:
            model.windows = configured


def weights_text(weights) -> str:
    return "[" + ", ".join(f"{w:g}" for w in weights) + "]"


def step_scalars(shape: dict) -> dict[str, float]:
    """The tensorboard/W&B scalars of what one step trained on (training.train_step's `shape`): the stage, the
    sequence length and count of the last micro-batch, the widest window, the tokens of all its micro-batches on
    this rank and the largest position used; with a mix, each train-data-path's weight (normalised) and the
    share of this rank's samples of the step that came from it."""
    length = shape["length"]
    scalars = {"length/stage": length.stage, "length/seq_length": shape["seq_length"],
               "length/sequences_per_micro_batch": shape["sequences"], "length/window": shape["window"],
               "length/tokens_per_step_per_rank": shape["tokens"], "length/last_position": shape["last_position"]}
    if length.data_weights is not None:
        total, drawn = sum(length.data_weights), sum(shape["sources"])
        for path, (weight, count) in enumerate(zip(length.data_weights, shape["sources"])):
            scalars[f"length/data_weight_{path}"] = weight / total
            scalars[f"length/data_share_{path}"] = count / drawn
    return scalars


class LengthSchedule:
    def __init__(self, stages: list[Stage], full_length: int, run_weights: tuple[float, ...] | None = None):
        """`run_weights`: the run's train-data-weights (equal ones when it sets none), what a stage without its
        own mix draws with; needed only where a stage sets one."""
        self.stages, self.full_length = stages, full_length
        self.mixes = any(stage.train_data_weights is not None for stage in stages)
        self.run_weights = run_weights

    def stage_index(self, done: int) -> int:
        return max(i for i, s in enumerate(self.stages) if s.start_step <= done)

    def at(self, done: int) -> LengthAt:
        """The length and window of the step after `done` steps."""
        index = self.stage_index(done)
        stage = self.stages[index]
        seq_length = self._value(stage, stage.seq_length, done, divisor=True) or self.full_length
        window = self._value(stage, stage.window, done, divisor=False)
        return LengthAt(index, seq_length, window, self.full_length // seq_length, self.mix_of(index))

    def mix_of(self, index: int) -> tuple[float, ...] | None:
        """Stage `index`'s weights of train-data-paths: its own, else the run's (None where no stage sets a mix)."""
        if not self.mixes:
            return None
        return self.stages[index].train_data_weights or self.run_weights

    def mix_spans(self, train_iters: int) -> list[tuple[int, int, tuple[float, ...]]]:
        """(first step done, step done after the last, weights) of each span of steps with one mix, in order, up to
        train_iters: stages in a row with the same weights are one span (the mix does not change between them)."""
        spans = []
        for index, stage in enumerate(self.stages):
            end = self.stages[index + 1].start_step if index + 1 < len(self.stages) else train_iters
            begin, end, weights = stage.start_step, min(end, train_iters), self.mix_of(index)
            if begin >= end:
                continue
            if spans and spans[-1][2] == weights and spans[-1][1] == begin:
                spans[-1] = (spans[-1][0], end, weights)
            else:
                spans.append((begin, end, weights))
        return spans

    def unreached(self, train_iters: int) -> str | None:
        """The line that says which stages a run of `train_iters` steps does not reach, or None."""
        late = [i for i, stage in enumerate(self.stages) if stage.start_step >= train_iters]
        if not late:
            return None
        return (f"length schedule: stage(s) {', '.join(map(str, late))} start at or after train-iters "
                f"{train_iters} and are not reached in this run")

    def _value(self, stage: Stage, value, done: int, divisor: bool) -> int | None:
        if not isinstance(value, tuple):
            return value
        first, last = value
        progress = min(done - stage.start_step, stage.steps) / stage.steps
        line = first + (last - first) * progress
        if not divisor:
            return int(line + 1e-9)  # floor, robust to the float sum landing just below an integer
        return max(d for d in range(1, self.full_length + 1) if self.full_length % d == 0 and d <= line + 1e-9)

    def table(self, train_iters: int, micro_batch: int, max_rows_per_stage: int = 8) -> list[str]:
        """`--dry-run`'s table: the steps (numbered as the log numbers them, from 1) over which the length and
        window hold, with the sequences per micro-batch and the tokens per micro-batch."""
        mix = "  train-data-weights" if self.mixes else ""
        rows = [f"{'steps':>13}  {'stage':>5}  {'seq-length':>10}  {'window':>10}  {'sequences/micro-batch':>21}  "
                f"tokens/micro-batch{mix}"]
        for index, stage in enumerate(self.stages):
            end = self.stages[index + 1].start_step if index + 1 < len(self.stages) else train_iters
            end = min(end, train_iters)
            spans = []  # [first step, last step, LengthAt]
            for done in range(stage.start_step, end):
                at = self.at(done)
                if spans and spans[-1][2] == at:
                    spans[-1][1] = done + 1
                else:
                    spans.append([done + 1, done + 1, at])
            if not spans:
                rows.append(f"{'-':>13}  {index:>5}  starts after step {stage.start_step}, past train-iters "
                            f"{train_iters}: not reached in this run")
                continue
            shown = spans if len(spans) <= max_rows_per_stage else \
                spans[:max_rows_per_stage // 2] + [None] + spans[-(max_rows_per_stage // 2):]
            for span in shown:
                if span is None:
                    rows.append(f"{'...':>13}  ({len(spans) - max_rows_per_stage} more rows of this ramp)")
                    continue
                first, last, at = span
                window = "configured" if at.window is None else str(at.window)
                weights = "" if at.data_weights is None else f"  {weights_text(at.data_weights):>18}"
                rows.append(f"{f'{first}-{last}':>13}  {at.stage:>5}  {at.seq_length:>10}  {window:>10}  "
                            f"{micro_batch * at.samples_split:>21}  {micro_batch * self.full_length:>18}{weights}")
        return rows


def parse_schedule(value, full_length: int, data_paths: int = 0,
                   run_weights: tuple[float, ...] | None = None) -> LengthSchedule:
    """`length-schedule` read and checked; LengthScheduleError names the entry and the key. `data_paths`: how
    many train-data-paths the run has (0 with data-path), which a stage's train-data-weights must weigh one each;
    `run_weights`: their train-data-weights. A stage may start after train-iters (a short trial run of a long
    schedule): --dry-run's table and the run's first lines say which stages it does not reach."""
    top = "length_schedule"
    if not isinstance(value, list) or not value:
        raise LengthScheduleError(top, f"is {quote(value)}; give a list of stages such as [{{start-step: 0, "
                                  "seq-length: 64}, {start-step: 100, seq-length: 256}], or null for one length.")
    stages = []
    for i, entry in enumerate(value):
        where = f"{top}[{i}]"
        if not isinstance(entry, dict):
            raise LengthScheduleError(where, f"is {quote(entry)}; each stage is a mapping such as {{start-step: 0, "
                                      "seq-length: 64}.")
        entry = {str(k).replace("-", "_"): v for k, v in entry.items()}
        for key in entry:
            if key in EXTENSION_KEYS:
                raise LengthScheduleError(f"{where}.{key}", (
                    "cannot change within one run: a stage changes lengths and windows only. Extend the trained "
                    "model with a fine-tune of its checkpoint instead (finetune: true, load: its checkpoints, the "
                    "longer seq-length and the new rotary-emb-base or rotary-scaling), as docs/length-schedules.md "
                    "shows under 'Extending a trained model to a longer context'."))
            if key not in STAGE_KEYS:
                raise LengthScheduleError(f"{where}.{key}", "is not a stage key; a stage takes " + ", ".join(
                    k.replace("_", "-") for k in STAGE_KEYS) + ". Remove it.")
        stages.append(_stage(entry, where, full_length, stages, data_paths))
    return LengthSchedule(stages, full_length, run_weights)


def _stage(entry: dict, where: str, full_length: int, before: list[Stage], data_paths: int) -> Stage:
    def integer(key, value, low):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise LengthScheduleError(f"{where}.{key.replace('_', '-')}", f"is {quote(value)}; it must be an "
                                      f"integer >= {low}.")
        return value

    if "start_step" not in entry:
        raise LengthScheduleError(where, "has no start-step; give the number of steps done when the stage begins "
                                  "(0 for the first).")
    start = integer("start_step", entry["start_step"], 0)
    if not before and start != 0:
        raise LengthScheduleError(f"{where}.start-step", f"is {start}; the first stage starts at 0, so that every "
                                  "step has a stage. Add a stage at 0 or start this one there.")
    if before and start <= before[-1].start_step:
        raise LengthScheduleError(f"{where}.start-step", f"is {start}, not after the previous stage's "
                                  f"{before[-1].start_step}; list the stages in the order they run.")
    if before and before[-1].ramp and before[-1].start_step + before[-1].steps > start:
        raise LengthScheduleError(f"{where}.start-step", f"is {start}, inside the previous stage's ramp (steps "
                                  f"{before[-1].start_step} + {before[-1].steps}); start it after the ramp ends "
                                  "or shorten the ramp.")
    ramp = entry.get("ramp")
    if ramp is not None and ramp not in RAMPS:
        raise LengthScheduleError(f"{where}.ramp", f"is {quote(ramp)}; the ramps are {', '.join(RAMPS)}.")
    if ramp is None and "steps" in entry:
        raise LengthScheduleError(f"{where}.steps", "is set without a ramp; add `ramp: linear` or remove steps.")
    steps = integer("steps", entry.get("steps"), 1) if ramp else None
    if not {"seq_length", "window", "train_data_weights"} & set(entry):
        raise LengthScheduleError(where, "sets neither seq-length, window nor train-data-weights; give at least "
                                  "one of them.")

    def value_of(key, check):
        value = entry.get(key)
        if value is None:
            return None
        if ramp:
            if not (isinstance(value, list) and len(value) == 2):
                raise LengthScheduleError(f"{where}.{key.replace('_', '-')}", f"is {quote(value)}; under a ramp "
                                          "give the first and the last value, e.g. [16, 64].")
            return tuple(check(v) for v in value)
        return check(value)

    def length(value):
        integer("seq_length", value, 1)
        if value > full_length:
            raise LengthScheduleError(f"{where}.seq-length", f"is {value}, longer than seq-length {full_length}: "
                                      "a stage splits the run's samples, it cannot make them longer. Set "
                                      f"seq-length to the schedule's longest length ({value}); shorter stages "
                                      "split those samples.")
        if full_length % value:
            raise LengthScheduleError(f"{where}.seq-length", f"is {value}, which does not divide seq-length "
                                      f"{full_length}: each sample is split into equal sequences so that the "
                                      "tokens per batch stay the same. Choose a divisor (e.g. "
                                      f"{max(d for d in range(1, value) if full_length % d == 0)}).")
        return value

    lengths = value_of("seq_length", length)
    windows = value_of("window", lambda v: integer("window", v, 1))
    if ramp and not isinstance(lengths, tuple) and not isinstance(windows, tuple):
        raise LengthScheduleError(where, "has a ramp but neither seq-length nor window as a pair [first, last].")
    mix = None if entry.get("train_data_weights") is None else \
        _data_weights(entry["train_data_weights"], f"{where}.train-data-weights", data_paths, ramp)
    return Stage(start, lengths, windows, ramp, steps, mix)


def _data_weights(value, where: str, data_paths: int, ramp: str | None) -> tuple[float, ...]:
    """A stage's train-data-weights checked: one finite weight >= 0 per train-data-path, not all 0."""
    if not data_paths:
        raise LengthScheduleError(where, "is set, but the run has no train-data-paths: a stage's mix weighs the "
                                  "train-data-paths (data-path is one dataset, cut by split). List the sources as "
                                  "train-data-paths, or remove it.")
    if ramp and isinstance(value, list) and value and all(isinstance(v, list) for v in value):
        raise LengthScheduleError(where, f"is {quote(value)}, a first and a last mix under a ramp; a mix does not "
                                  "ramp (megatron-core blends with fixed weights), so a ramp stage's weights hold for "
                                  "the whole stage. Give one list of weights, or step the mix with stages of their "
                                  "own.")
    number = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)  # noqa: E731
    if not isinstance(value, list) or not all(number(v) for v in value):
        raise LengthScheduleError(where, f"is {quote(value)}; give one number per entry of train-data-paths, in "
                                  f"their order (the run has {data_paths}), e.g. {[1] * data_paths}.")
    if len(value) != data_paths:
        raise LengthScheduleError(where, f"has {len(value)} weight(s) for {data_paths} train-data-paths; give one "
                                  "per path, in their order (0 leaves a path out of this stage).")
    if any(v < 0 for v in value):
        raise LengthScheduleError(where, f"is {quote(value)}; a weight cannot be negative (0 leaves a path out of "
                                  "this stage).")
    if not math.isfinite(sum(value)):
        raise LengthScheduleError(where, f"is {quote(value)}, whose sum is not a finite number; only the ratios "
                                  "count, so give the weights on a smaller scale (e.g. [1, 3]).")
    if not any(v > 0 for v in value):
        raise LengthScheduleError(where, f"is {quote(value)}: every weight is 0, so the stage has nothing to "
                                  "train on. Give at least one path a weight above 0.")
    if data_paths == 1 and value != [1]:
        raise LengthScheduleError(where, f"is {quote(value)}, but the run has one train-data-path: every sample "
                                  "comes from it whatever its weight (a weight does not subsample). Remove it.")
    return tuple(float(v) for v in value)
