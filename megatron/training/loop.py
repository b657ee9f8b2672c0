"""The NeoX training loop on DeepSpeed's engine.

pretrain(run) -> start-up checks -> datasets -> model, optimizer, LR schedule -> deepspeed.initialize ->
resume -> train() (train_step() per step, evaluate() every eval-interval, save every
checkpoint-factor) -> final checkpoint, validation and test. `run` is the TrainingRun of run_keys.py, which
train.py builds from the config once the process group is joined: nothing here reads the config itself.
"""
import contextlib
import dataclasses
import itertools
import math
import signal
import time
from dataclasses import dataclass, field

import deepspeed
import torch
from deepspeed.accelerator import get_accelerator

from megatron.checkpoint.checkpointing import SaveFailed, fine_tune_so_far, load_checkpoint, save_checkpoint
from megatron.checkpoint.run_keys import CheckpointRun
from megatron.data import DataRun, build_data_loader, build_train_valid_test_datasets
from megatron.data.packed_documents import samples_across_documents
from megatron.run.launcher_watch import watch_launcher
from megatron.model import GPTModel
from megatron.model.transformer import compile_layers
from megatron.model.sliced_loss import logits_losses
from megatron.run.monitor import Monitor, kernel_scalars
from megatron.training.optimizer import build_lr_scheduler, build_optimizer
from megatron.parallel import SequenceParallelGroups, loss_share
from megatron.model.sequence_parallel import SequenceParallel
from megatron.run.preflight import check_training
from megatron.tokenizer import build_tokenizer
from megatron.training.random_positions import draw_positions
from megatron.training.pose_positions import draw_pose_positions
from megatron.length_schedule import LengthAt, step_scalars
from megatron.data.fragments import split_into_fragments
from megatron.training.banner import masking_line, model_line, run_line
from megatron.training.run_keys import LoopRun, StepRun, TrainingRun


class TrainingError(RuntimeError):
    """The run cannot go on (e.g. it diverged); the message says why and what to try."""


@dataclass
class TrainingResult:
    iteration: int                                         # last step trained
    losses: dict[int, float] = field(default_factory=dict)  # step -> mean training loss (this launch)
    skipped_steps: int = 0
    valid_loss: float | None = None
    test_loss: float | None = None
    preempted: bool = False                                # stopped early (a signal, or exit-interval)
    stopped_by: int | None = None                          # the signal that stopped it (SIGTERM/SIGINT)


@dataclass
class StepOutcome:
    loss: float        # mean over the global batch (all micro-batches and ranks)
    skipped: bool      # the optimizer did not update (NaN/inf loss, fp16 overflow)
    grad_norm: float | None
    shape: dict | None = None  # with a length-schedule: what the step trained on (length_schedule.step_scalars)
    local: float | None = None  # the caller's own scalar, read with the step's one host read (_after_backward)


def lm_loss(logits: torch.Tensor, labels: torch.Tensor, loss_mask: torch.Tensor, vocab_size: int) -> torch.Tensor:
    """Mean next-token cross entropy over the tokens loss_mask keeps. logits [b, s, padded_vocab];
    the rows past `vocab_size` pad the output layer and are no tokens, so they get no probability."""
    return masked_mean(logits_losses(logits, labels, vocab_size), loss_mask)


def batch_loss(model, batch: dict, vocab_size: int, packed: dict) -> torch.Tensor:
    """lm_loss of `batch`, the model applying its head with the loss (`loss-head`: by slices, never the whole
    logits, where it is sliced)."""
    return masked_mean(model(batch["tokens"], labels=batch["labels"], vocab_size=vocab_size, **packed),
                       batch["loss_mask"])


def masked_mean(losses: torch.Tensor, loss_mask: torch.Tensor) -> torch.Tensor:
    mask = loss_mask.flatten().float()
    return (losses.flatten() * mask).sum() / mask.sum().clamp(min=1.0)


def pretrain(run: TrainingRun) -> TrainingResult:
    """Train the run's model: `run` is built at train.py's door once this process joined its process group
    (NeoXArgs.join_process_group, then NeoXArgs.training_run)."""
    watch_launcher(print if run.rank == 0 else lambda *a, **k: None)
    tokenizer = build_tokenizer(run.tokenizer)
    # before any data is read or step spent; holds the save folder
    lock = check_training(run.preflight, run.model, tokenizer.padded_vocab_size)
    try:
        return _pretrain(run, tokenizer)
    finally:
        lock.release()


def _pretrain(run: TrainingRun, tokenizer) -> TrainingResult:
    data = run.data  # the data keys, with this rank's share
    train_set, valid_set, test_set = build_train_valid_test_datasets(data, tokenizer)
    if run.rank == 0:
        print(run_line(run.banner), flush=True)
    engine, optimizer = setup_model_and_optimizer(run, tokenizer.padded_vocab_size)
    if run.rank == 0 and train_set is not None and (masking := masking_line(
            run.banner, *samples_across_documents(train_set))):
        print(masking, flush=True)
    checkpoint = run.checkpoint  # what saves and the resume read of the config, as the run trains with it
    iteration, consumed = load_checkpoint(checkpoint, engine)
    if iteration >= data.train_iters and run.rank == 0:  # e.g. `train.py configs/tiny.yml` after the demo
        held = fine_tune_so_far(checkpoint) or checkpoint.load  # a relaunched fine-tune resumed its own save
        print(f"the checkpoint in {held} is at step {iteration}, already train-iters "
              f"({data.train_iters}): nothing to train; the final validation runs on it. Raise train-iters "
              f"(--set train-iters=N) to train further, or name another save/load folder to start anew.", flush=True)
    with torch.random.fork_rng(devices=[]):  # starting a DataLoader draws a seed: keep dropout's stream
        train_batches = iter(build_data_loader(train_set, data, consumed))

    monitor = Monitor(run.monitor, iteration)
    try:
        with Preemption() as preemption:
            result = train(run, engine, optimizer, train_batches, valid_set, tokenizer.vocab_size, monitor,
                           preemption, iteration, consumed)
        if result.preempted:
            return result
        for split, dataset in (("valid", valid_set), ("test", test_set)):
            loss = evaluate(run.step, data, engine, dataset, tokenizer.vocab_size)
            if loss is not None:
                monitor.report_evaluation(result.iteration, split, loss, data.seq_length_val)
                setattr(result, f"{split}_loss", loss)
                if not math.isfinite(loss):  # a run whose final loss is NaN did not finish well
                    raise TrainingError(
                        f"the final {split} loss (step {result.iteration}) is {loss}: the trained weights give "
                        f"NaN/inf on the {split} split although they gave a finite training loss. Check that "
                        "split's data (tokens outside the vocabulary?) before using this run's checkpoint.")
    finally:
        monitor.close()
    return result


def setup_model_and_optimizer(run: TrainingRun, vocab_size: int):
    """The DeepSpeed engine around the model (`vocab_size` embedding rows), our optimizer and LR
    schedule (the DeepSpeed JSON's own `optimizer` entry is dropped: the optimizer built here carries
    the weight-decay groups)."""
    model = GPTModel(dataclasses.replace(run.model, padded_vocab_size=vocab_size))
    if run.compile_blocks:
        compile_layers(model.layers)
    optimizer = build_optimizer(run.optimizer, model)
    scheduler = build_lr_scheduler(run.optimizer, run.lr_schedule, optimizer)
    config = {k: v for k, v in run.deepspeed_config.items() if k not in ("optimizer", "scheduler")}
    config["zero_allow_untested_optimizer"] = True  # ZeRO checks the exact class; ours subclasses torch's AdamW
    if not deepspeed_clips(config):
        config["gradient_clipping"] = 0.0  # train_step clips (clip_gradients), with one norm over all tensors
    mpu = None  # sequence-parallel-size > 1: the groups, so the engine sums gradients over a sequence's ranks
    if run.step.sequence_parallel_size > 1:
        mpu = SequenceParallelGroups(run.step.sequence_parallel_size)
        model.sequence_parallel = SequenceParallel(mpu.sequence_group)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, lr_scheduler=scheduler, config=config,
                                           mpu=mpu)
    if run.rank == 0:
        count = sum(p.numel() for p in model.parameters())
        print(model_line(run.banner, count, engine.zero_optimization_stage()), flush=True)
    return engine, optimizer


def train(run: TrainingRun, engine, optimizer, train_batches, valid_set, vocab_size, monitor, preemption,
          iteration: int, consumed: int) -> TrainingResult:
    """Steps from `iteration` to train-iters (the run's data keys, its length schedule among them)."""
    data, checkpoint, loop, step_keys = run.data, run.checkpoint, run.loop, run.step
    save = checkpoint.save
    result = TrainingResult(iteration)
    bad_in_a_row = 0
    last_saved = iteration or None  # the checkpoint this run resumed from, if any
    save_due = False  # a save falls due at a checkpoint-factor step; it waits for a step that was applied
    extra_saves = set(loop.extra_save_iters)
    # The weights are tried on the next batch before each save (and at the end): finite but blown-up
    # weights (lr or init-method-std 1e30) only show as NaN/inf once used. Taking it and putting it
    # back leaves the data stream as it was (the sampler is endless).
    probe = next(train_batches)
    train_batches = itertools.chain([probe], train_batches)
    weights = WeightCheck(step_keys, engine, probe, vocab_size, save)
    if save and iteration == 0 and 0 in extra_saves:  # upstream's "save the initial weights"
        checked_save(checkpoint, engine, weights, 0, consumed, monitor, last_saved)
        last_saved = 0
    schedule = data.length_schedule
    length = None
    if schedule is not None and (line := schedule.unreached(data.train_iters)):
        monitor.print(line)
    while iteration < data.train_iters:
        if schedule is not None:
            length, previous = schedule.at(iteration), length
            if previous is None or previous.stage != length.stage:  # the first step of this launch, or a new stage
                monitor.print(f"length schedule: step {iteration + 1} is in {length.describe()}")
        step = train_step(step_keys, engine, optimizer, train_batches, vocab_size, length)
        iteration += 1
        consumed += data.train_batch_size
        result.iteration, result.losses[iteration] = iteration, step.loss
        result.skipped_steps += step.skipped
        bad_in_a_row = bad_in_a_row + 1 if step.skipped else 0
        scale = engine.optimizer.loss_scale if engine.fp16_enabled() else None
        monitor.record_step(step.loss, step.skipped, _current_lr(engine), step.grad_norm, scale)
        if iteration % loop.log_interval == 0:
            shape = step_scalars(step.shape) if step.shape else {}
            monitor.report(iteration, {**kernel_scalars(engine.module), **shape},
                           length.describe() if length else None)
        if bad_in_a_row >= loop.max_consecutive_bad_steps:
            raise TrainingError(
                f"stopping at step {iteration}: the last {bad_in_a_row} steps had a NaN/inf loss or fp16 "
                f"overflow (max-consecutive-bad-steps = {loop.max_consecutive_bad_steps}); they were "
                f"skipped and {_saved_so_far(save, last_saved)}. {TRY_INSTEAD}")
        if save and loop.checkpoint_factor and iteration % loop.checkpoint_factor == 0:
            save_due = True
        if save and iteration in extra_saves:
            save_due = True
        if save_due and not step.skipped:
            checked_save(checkpoint, engine, weights, iteration, consumed, monitor, last_saved)
            last_saved, save_due = iteration, False
        if iteration % data.eval_interval == 0 and iteration < data.train_iters:
            loss = evaluate(step_keys, data, engine, valid_set, vocab_size)
            if loss is not None:
                monitor.report_evaluation(iteration, "valid", loss, data.seq_length_val)
        if preemption.requested():
            monitor.print(f"received {preemption.signal_name}: stopping after step {iteration}")
            result.preempted = True
            result.stopped_by = preemption.received or signal.SIGTERM  # another rank's signal: as SIGTERM
            break
        if loop.exit_interval and iteration % loop.exit_interval == 0 and iteration < data.train_iters:
            monitor.print(f"exit-interval {loop.exit_interval}: stopping after step {iteration}")
            result.preempted = True  # stop as a preempted run does: save, skip the final evaluation
            break
    learned_nothing(loop, save, result, bad_in_a_row, last_saved)
    if not save:
        weights.check(iteration, last_saved)
        if result.preempted:
            monitor.print("no checkpoint written: `save` is not set")
    elif bad_in_a_row:  # fp16 overflow with a finite loss (a NaN/inf one stopped the run above)
        monitor.print(f"no final checkpoint: the last {bad_in_a_row} step(s) were skipped (fp16 overflow); "
                      f"{_saved_so_far(save, last_saved)}")
    elif iteration > (last_saved or 0):
        checked_save(checkpoint, engine, weights, iteration, consumed, monitor, last_saved)
    return result


TRY_INSTEAD = ("Lower the learning rate or init-method-std, lengthen warmup, use bf16 or fp32 instead of fp16, "
               "or check the data, then resume from the last checkpoint (or start again without one).")


def _saved_so_far(save: str | None, last_saved) -> str:
    """What is kept of the run so far (`save`: the folder checkpoints go to, if any)."""
    if not save:
        return "no checkpoint was written (`save` is not set)"
    if last_saved is None:
        return f"no checkpoint was saved in {save}"
    return f"the last checkpoint is step {last_saved} (`latest` in {save})"


def learned_nothing(loop: LoopRun, save: str | None, result: TrainingResult, bad_in_a_row: int, last_saved) -> None:
    """A run that ends on a NaN/inf loss, or whose every step was skipped, has not trained: it stops with
    an error (a non-zero exit status, so a sweep counts it as failed), never as a finished run."""
    if not result.losses:
        return
    steps = len(result.losses)
    if result.skipped_steps == steps:
        raise TrainingError(
            f"no step of this run was applied: all {steps} step(s) up to step {result.iteration} had a NaN/inf "
            f"loss or fp16 overflow and were skipped, so the weights did not train; "
            f"{_saved_so_far(save, last_saved)}. {TRY_INSTEAD}")
    if not math.isfinite(result.losses[result.iteration]):
        raise TrainingError(
            f"the run ended at step {result.iteration} on a NaN/inf loss ({bad_in_a_row} skipped step(s) in a "
            f"row; max-consecutive-bad-steps = {loop.max_consecutive_bad_steps} was not reached before "
            f"train-iters); no final checkpoint was saved and {_saved_so_far(save, last_saved)}. "
            f"{TRY_INSTEAD}")


def sequence_share(engine, loss, batch: dict):
    """`loss` (a rank's mean), or under sequence parallelism its share of the whole sequences' loss."""
    parallel = engine.module.sequence_parallel
    return loss if parallel is None else loss_share(loss, batch["loss_mask"], parallel.group)


def packing(step: StepRun, batch: dict, positions=None) -> dict:
    """The model's keyword arguments for a batch's packed documents (reset-attention-mask,
    reset-position-ids: megatron/data/packed_documents.py), or `positions` [s] (random-positions)."""
    if not step.reset_attention_mask:
        return {"position_ids": positions}
    return {"document_ids": batch["document_ids"],
            "position_ids": batch["position_ids"] if step.reset_position_ids else positions}


def train_step(step: StepRun, engine, optimizer, train_batches, vocab_size,
               length: LengthAt | None = None) -> StepOutcome:
    """One optimizer step over gradient-accumulation-steps micro-batches. A step whose loss is NaN/inf
    on any rank changes nothing (fp16 overflow is DeepSpeed's to skip; the LR schedule then waits too).
    `length` (length-schedule): each sample split into sequences of its seq-length, the windows capped at its
    window; the outcome's `shape` says what the step trained on.

    The host reads the device once per step (loss sum, kept tokens and, where the step clips, the gradient
    norm, in one copy): each read waits for the accelerator's queue to drain, so none is taken per tensor."""
    device = get_accelerator().current_device_name()
    accumulation = step.gradient_accumulation_steps
    total = torch.zeros((), dtype=torch.float64, device=device)
    kept = torch.zeros((), dtype=torch.float64, device=device)  # tokens the loss counts
    shape = None if length is None else {"length": length, "tokens": 0, "last_position": 0}
    # the largest drawn or per-document position, read with the step's one host read (only with a schedule)
    drawn_last = None
    if length is not None and length.data_weights is not None:
        shape["sources"] = [0] * len(length.data_weights)  # this rank's samples of the step from each path
    with windows_for(engine.module, length):
        for micro in range(accumulation):
            batch = dict(next(train_batches))
            sources = batch.pop("dataset_id", None)  # a blend's per-sample path index (on the host): not an input
            if shape is not None and "sources" in shape and sources is not None:
                for path in sources.tolist():
                    shape["sources"][path] += 1
            batch = {k: v.to(device) for k, v in batch.items()}
            if length is not None:
                batch = split_into_fragments(batch, length.seq_length)
            positions = training_positions(step, batch["tokens"].shape[1], device)
            arguments = packing(step, batch, positions)
            loss = sequence_share(engine, batch_loss(engine, batch, vocab_size, arguments), batch)
            engine.backward(loss)
            total += loss.detach().double()
            kept += batch["loss_mask"].sum().double()
            if shape is not None:
                shape["sequences"], shape["seq_length"] = batch["tokens"].shape
                shape["tokens"] += batch["tokens"].numel()
                shape["last_position"] = max(shape["last_position"], batch["tokens"].shape[1] - 1)
                if arguments["position_ids"] is not None:  # drawn or per-document positions: their largest
                    last = arguments["position_ids"].max().double()
                    drawn_last = last if drawn_last is None else torch.maximum(drawn_last, last)
                shape["window"] = max((w or batch["tokens"].shape[1] for w in engine.module.windows), default=0)
            if micro < accumulation - 1:
                engine.step()  # within the accumulation: DeepSpeed only counts the micro-step
    with torch.profiler.record_function(AFTER_BACKWARD):
        outcome = _after_backward(step, engine, optimizer, total, kept, accumulation, drawn_last)
    if outcome.local is not None:
        shape["last_position"] = int(outcome.local)
    outcome.shape = shape
    return outcome


def training_positions(step: StepRun, length: int, device) -> torch.Tensor | None:
    """A training micro-batch's positions [length] shared by its sequences: random-positions' or PoSE's draw,
    or None (0..length-1, or the documents' with reset-position-ids)."""
    if step.random_positions is not None:
        return draw_positions(length, step.random_positions, device)
    if step.pose_target_length is not None:
        # A length-schedule's shorter sequences keep the target window: each stage sees its distances.
        return draw_pose_positions(length, step.pose_target_length, min(step.pose_chunks, length), device)
    return None


def windows_for(model, length: LengthAt | None):
    """The model's windows capped by a length-schedule stage inside the block (length_schedule.py)."""
    return contextlib.nullcontext() if length is None else length.windows_applied(model)


AFTER_BACKWARD = "train_step: after the backward"  # its profiler label: all-reduce, clip, host read, optimizer


def _after_backward(step: StepRun, engine, optimizer, total, kept, accumulation, local=None) -> StepOutcome:
    """The optimizer step after the micro-batches' backward passes. `local`: a scalar of this rank's own (not
    reduced over ranks) that the caller reads with the step's one host read, returned as `outcome.local`."""
    both = torch.stack([total, kept])
    torch.distributed.all_reduce(both)  # NaN anywhere makes the sum NaN everywhere: all ranks agree
    clips_here = clips_in_step(engine)
    if clips_here:  # the gradients are all-reduced by now: the norm is the global one on every rank
        both = torch.cat([both, clip_gradients(engine.module, step.gradient_clipping).double().view(1)])
    if local is not None:
        both = torch.cat([both, local.view(1)])
    read = both.to("cpu", copy=True).tolist()  # the step's one host read
    local = read.pop() if local is not None else None
    total, kept = read[0], read[1]
    if kept == 0:
        raise empty_loss_mask(step, "a training step's global batch")
    replicas = torch.distributed.get_world_size() // step.sequence_parallel_size  # a sequence's ranks add up
    mean_loss = total / (accumulation * replicas)
    grad_norm = read[2] if clips_here else None
    # A NaN/inf gradient norm skips the step as a NaN/inf loss does (the finite check is the clip's norm).
    skip = (not math.isfinite(total) and not engine.fp16_enabled()) or not math.isfinite(grad_norm or 0.0)
    optimizer.skip_step = skip
    try:
        engine.step(lr_kwargs={"increment": 0 if skip else 1})
    finally:
        optimizer.skip_step = False
    if not clips_here:  # ZeRO and fp16: DeepSpeed clips and reports the norm
        grad_norm = engine.get_global_grad_norm()
        grad_norm = None if grad_norm is None else float(grad_norm)
    return StepOutcome(mean_loss, skip or not engine.was_step_applied(), grad_norm, local=local)


def clips_in_step(engine) -> bool:
    """Whether train_step clips the gradients itself: without ZeRO, in fp32 or bf16 on fp32 weights
    (DeepSpeed's torch_autocast). DeepSpeed's own clipping there takes a norm and a multiply per tensor;
    setup_model_and_optimizer turns it off for these runs (`deepspeed_clips`)."""
    return not (engine.zero_optimization() or engine.fp16_enabled() or engine.bfloat16_enabled())


def deepspeed_clips(config: dict) -> bool:
    """clips_in_step's answer negated, from the DeepSpeed config the engine is built from."""
    on = lambda key: bool(config.get(key, {}).get("enabled", False))  # noqa: E731
    return bool(config.get("zero_optimization", {}).get("stage", 0)) or on("fp16") or on("bf16")


def clip_gradients(model: torch.nn.Module, max_norm: float) -> torch.Tensor:
    """Scale the gradients to a global norm of at most `max_norm` (0: leave them) in a few multi-tensor
    kernels; returns the norm before clipping as a device tensor, NaN/inf when any gradient is."""
    parameters = [p for p in model.parameters() if p.grad is not None]
    if not parameters:
        return torch.zeros((), device=get_accelerator().current_device_name())
    norm = torch.nn.utils.get_total_norm([p.grad for p in parameters], foreach=True)
    if max_norm > 0:
        torch.nn.utils.clip_grads_with_norm_(parameters, max_norm, norm, foreach=True)
    return norm


def evaluate(step: StepRun, data: DataRun, engine, dataset, vocab_size) -> float | None:
    """Mean loss of the first `eval-iters` batches of `dataset` (at seq-length-val): the same
    batches at every evaluation, so the curve shows the model changing, not the sample."""
    if dataset is None or data.eval_iters == 0:
        return None
    device = get_accelerator().current_device_name()
    stats = torch.zeros(3, dtype=torch.float64, device=device)  # loss sum, batches, tokens the loss counts
    engine.eval()
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # leave the training randomness as it was
        for batch in itertools.islice(build_data_loader(dataset, data, 0), data.eval_iters):
            batch = {k: v.to(device) for k, v in batch.items()}
            stats[0] += sequence_share(engine, batch_loss(engine, batch, vocab_size, packing(step, batch)),
                                       batch).double()
            stats[1] += 1 / data.sequence_parallel_size  # a sequence's ranks hold shares of one batch
            stats[2] += batch["loss_mask"].sum().double()
    engine.train()
    torch.distributed.all_reduce(stats)
    if stats[2].item() == 0:
        raise empty_loss_mask(step, f"the {data.eval_iters} evaluation batches")
    return (stats[0] / stats[1]).item()


def empty_loss_mask(step: StepRun, what: str) -> TrainingError:
    """An empty loss mask is not a loss of zero: no token was scored, so there is no loss to report."""
    masks = "eod-mask-loss masks every end-of-document token" if step.eod_mask_loss else "the loss mask"
    return TrainingError(
        f"every token of {what} is masked out of the loss ({masks}, and the batch holds nothing else), so there is "
        f"no loss to report or learn from; lm_loss would read 0.0, which is not a perfect score. Check the data "
        f"(`data-path` / `train-data-paths`: documents of end-of-document tokens only?) or turn `eod-mask-loss` off.")


class WeightCheck:
    """Whether the weights trained: finite, and giving a finite loss on `probe` (one micro-batch), on
    every rank. Weights pushed to huge but finite values pass the first test and fail the second."""

    def __init__(self, step: StepRun, engine, probe: dict, vocab_size: int, save: str | None):
        self.step, self.engine, self.probe, self.vocab_size, self.save = step, engine, probe, vocab_size, save

    def check(self, iteration: int, last_saved) -> None:
        """Raise TrainingError when the weights after step `iteration` diverged."""
        device = get_accelerator().current_device_name()
        batch = {k: v.to(device) for k, v in self.probe.items()}
        self.engine.eval()  # every rank runs the forward (collective under ZeRO-3), whatever its weights hold
        with torch.no_grad(), torch.random.fork_rng(devices=[]):  # leave the training randomness as it was
            loss = batch_loss(self.engine, batch, self.vocab_size, packing(self.step, batch))
        self.engine.train()
        parameters = self.engine.module.parameters()
        finite = torch.isfinite(loss).item() and all(torch.isfinite(p).all() for p in parameters)
        flag = torch.tensor([float(finite)], device=device)
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN)
        if not flag.item():
            raise TrainingError(
                f"training diverged: the weights after step {iteration} hold NaN/inf or give a NaN/inf loss on a "
                f"training batch, so they are not saved; {_saved_so_far(self.save, last_saved)}. "
                f"{TRY_INSTEAD}")


def checked_save(checkpoint: CheckpointRun, engine, weights: WeightCheck, iteration, consumed, monitor,
                 last_saved) -> None:
    """Save, unless the weights diverged: `latest` never names weights worse than the last checkpoint's."""
    weights.check(iteration, last_saved)
    start = time.time()
    try:
        folder = save_checkpoint(checkpoint, engine, iteration, consumed)
    except SaveFailed as err:  # the machine's fault, said in one paragraph; the run cannot go on without saving
        raise TrainingError(str(err)) from None
    monitor.print(f"saved checkpoint {folder} in {time.time() - start:.1f}s")


def _current_lr(engine) -> float:
    return engine.optimizer.param_groups[0]["lr"]


class Preemption:
    """SIGTERM (a scheduler's preemption notice, or DeepSpeed's launcher passing one on) and SIGINT
    (Ctrl-C) ask the loop to save and stop after the current step. Every rank stops at the same step:
    the request is reduced over ranks each step. Repeats are ignored: Ctrl-C reaches a rank both from
    the terminal and from the launcher, which kills what has not exited 30 s later."""
    SIGNALS = (signal.SIGTERM, signal.SIGINT)

    def __enter__(self):
        self.received = None
        self.previous = {s: signal.signal(s, self._handle) for s in self.SIGNALS}
        return self

    def __exit__(self, *exc):
        for s, handler in self.previous.items():
            signal.signal(s, handler)

    def _handle(self, signum, frame):
        self.received = self.received or signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.received).name if self.received else "a stop request from another rank"

    def requested(self) -> bool:
        if torch.distributed.get_world_size() == 1:  # no rank to agree with: no device read each step
            return self.received is not None
        flag = torch.tensor([float(self.received is not None)], device=get_accelerator().current_device_name())
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MAX)
        return bool(flag.item())
