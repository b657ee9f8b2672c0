"""What a training run reports, on rank 0: console lines (and a progress bar on a terminal, megatron/progress.py),
TensorBoard events and Weights & Biases, all with the same scalar names:

    train/loss  train/ppl  train/lr  train/grad_norm  train/tokens_per_sec  train/skipped_steps
    train/loss_scale (fp16)  valid/loss  valid/ppl  test/loss  test/ppl
    pos_emb/<param>/{mean,min,max,head<h>}   effective kernel parameters (pos_emb/layer<i>/... per layer)
"""
import datetime
import math
import sys
import time

import deepspeed
import torch

from megatron.progress import Progress
from megatron.run.run_keys import MonitorRun
from megatron.run.wandb_run import start_wandb


def kernel_scalars(model: torch.nn.Module) -> dict[str, float]:
    """Per-head effective kernel parameters of every positional module, and their mean/min/max.
    Collective under ZeRO-3 (the parameters are gathered), so every rank calls it."""
    scalars = {}
    for label, pe in zip(model.positional_labels(), model.positional_embeddings()):
        prefix = f"pos_emb/{label}/" if label else "pos_emb/"
        with deepspeed.zero.GatheredParameters(list(pe.parameters())), torch.no_grad():
            parameters = {name: values.detach().float().cpu() for name, values in pe.kernel_parameters().items()}
        for name, values in parameters.items():
            scalars[f"{prefix}{name}/mean"] = values.mean().item()
            scalars[f"{prefix}{name}/min"] = values.min().item()
            scalars[f"{prefix}{name}/max"] = values.max().item()
            for head, value in enumerate(values.tolist()):
                scalars[f"{prefix}{name}/head{head}"] = value
    return scalars


def perplexity(loss: float) -> float:
    return math.exp(min(loss, 700.0))  # exp overflows a float past ~709


def _duration(seconds: float) -> str:
    return str(datetime.timedelta(seconds=int(seconds)))


class Monitor:
    """Collects per-step numbers and reports them every `log_interval` steps. Only rank 0 writes."""

    def __init__(self, run: MonitorRun, start_iteration: int):
        self.run = run
        self.active = run.rank == 0
        self.tensorboard = self.wandb = None
        if self.active and run.tensorboard_dir:
            from torch.utils.tensorboard import SummaryWriter
            self.tensorboard = SummaryWriter(log_dir=run.tensorboard_dir)
        if self.active and run.wandb is not None:
            self.wandb = start_wandb(run.wandb)
        # A bar on a terminal only: elsewhere the report lines every log-interval steps are the progress.
        self.progress = Progress("train", total=run.train_iters, initial=start_iteration, unit="step",
                            show=self.active, stream=sys.stdout, lines=False)
        self.start_time = self.interval_start = time.time()
        self.start_iteration = start_iteration
        self.skipped_total = 0
        self._reset_interval()

    def _reset_interval(self):
        self.losses, self.interval_skipped, self.interval_start = [], 0, time.time()

    def record_step(self, loss: float, skipped: bool, lr: float, grad_norm: float | None,
                    loss_scale: float | None) -> None:
        if not skipped:  # a skipped step's loss is NaN/inf and would poison the average
            self.losses.append(loss)
        self.interval_skipped += skipped
        self.skipped_total += skipped
        self.last = {"lr": lr, "grad_norm": grad_norm, "loss_scale": loss_scale}
        self.progress.update(1, note=f"loss={loss:.4f}")

    def report(self, iteration: int, kernel: dict[str, float], note: str | None = None) -> None:
        """The interval's averages and rates (call every log_interval steps, on every rank); `note` ends the
        line (a length-schedule's stage)."""
        now = time.time()
        steps = len(self.losses) + self.interval_skipped
        per_step = (now - self.interval_start) / max(steps, 1)
        tokens_per_sec = self.run.train_batch_size * self.run.seq_length / per_step
        loss = sum(self.losses) / len(self.losses) if self.losses else float("nan")
        scalars = {"train/loss": loss, "train/ppl": perplexity(loss), "train/lr": self.last["lr"],
                   "train/tokens_per_sec": tokens_per_sec, "train/seconds_per_step": per_step,
                   "train/skipped_steps": self.skipped_total}
        if self.last["grad_norm"] is not None:
            scalars["train/grad_norm"] = self.last["grad_norm"]
        if self.last["loss_scale"] is not None:
            scalars["train/loss_scale"] = self.last["loss_scale"]
        self.write_scalars(iteration, {**scalars, **kernel})
        remaining = (self.run.train_iters - iteration) * per_step
        fields = [f"step {iteration:>{len(str(self.run.train_iters))}}/{self.run.train_iters}",
                  f"loss {loss:.4f}", f"ppl {perplexity(loss):.2f}", f"lr {self.last['lr']:.3e}"]
        if self.last["grad_norm"] is not None:
            fields.append(f"grad norm {self.last['grad_norm']:.3f}")
        if self.last["loss_scale"] is not None:
            fields.append(f"loss scale {self.last['loss_scale']:g}")
        fields += [f"{tokens_per_sec:,.0f} tokens/s", f"elapsed {_duration(now - self.start_time)}",
                   f"ETA {_duration(remaining)}"]
        if self.interval_skipped:
            fields.append(f"skipped {self.interval_skipped} (NaN/inf loss or fp16 overflow)")
        if note:
            fields.append(note)
        self.print(" | ".join(fields))
        self._reset_interval()

    def report_evaluation(self, iteration: int, split: str, loss: float, length: int) -> None:
        self.write_scalars(iteration, {f"{split}/loss": loss, f"{split}/ppl": perplexity(loss)})
        self.print(f"{split} at step {iteration} ({length} tokens per sequence): loss {loss:.4f} | "
                   f"ppl {perplexity(loss):.2f}")
        self.interval_start = time.time()  # evaluation time is not training throughput

    def write_scalars(self, iteration: int, scalars: dict[str, float]) -> None:
        if self.tensorboard is not None:
            for name, value in scalars.items():
                self.tensorboard.add_scalar(name, value, iteration)
            self.tensorboard.flush()
        if self.wandb is not None:
            self.wandb.log(scalars, step=iteration)

    def print(self, line: str) -> None:
        if self.active:
            self.progress.write(line)

    def close(self) -> None:
        self.progress.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        if self.wandb is not None:
            self.wandb.finish()
