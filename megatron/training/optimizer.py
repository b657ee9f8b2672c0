"""The optimizer (Adam/AdamW) and NeoX's learning-rate schedule, handed to DeepSpeed's engine."""
import math
import warnings

import torch
from deepspeed.accelerator import get_accelerator

from megatron.model import get_params_for_weight_decay_optimization
from megatron.errors import NeoXArgsError
from megatron.training.run_keys import LrSchedule, OptimizerRun

with warnings.catch_warnings():  # megatron.core announces at import that apex/TE are absent
    warnings.simplefilter("ignore", UserWarning)
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler


class SkippableStep:
    """Mixin for the optimizer DeepSpeed wraps: while `skip_step` is set, step() changes nothing
    (weights, moments, step counts). DeepSpeed itself skips only fp16 overflow; every wrapper it puts
    on top (ZeRO, bf16) ends in this step(), so the loop can skip a NaN/inf-loss step at any precision.
    The loop sets and clears the flag: ZeRO calls step() once per parameter group."""
    skip_step = False

    def step(self, closure=None):
        if self.skip_step:
            return None
        return super().step(closure)

    def load_state_dict(self, state_dict):
        """Also a checkpoint of DeepSpeed's bf16 engine (`bf16-weights: bf16`, ZeRO 0) resumed on fp32
        weights: its optimizer's state, and its fp32 master weights in place of the module's bf16 rounding."""
        if "fp32_groups" not in state_dict or "optimizer_state_dict" not in state_dict:
            return super().load_state_dict(state_dict)
        masters = state_dict["fp32_groups"]
        ours = [[p.shape for p in group["params"]] for group in self.param_groups]
        if [[m.shape for m in group] for group in masters] != ours:
            raise ValueError("the checkpoint's fp32 master weights do not match this model's parameters "
                             f"(shapes per group {[[tuple(m.shape) for m in g] for g in masters]}, here {ours})")
        super().load_state_dict(state_dict["optimizer_state_dict"])
        with torch.no_grad():
            for group, saved in zip(self.param_groups, masters):
                for param, master in zip(group["params"], saved):
                    param.copy_(master)
        return None


class AdamW(SkippableStep, torch.optim.AdamW):
    pass


def _prebuilt_fused_adam():
    """apex's or DeepSpeed's fused Adam when installed ready to run (never compiled at run time)."""
    try:
        from apex.optimizers import FusedAdam
        return FusedAdam
    except ImportError:
        pass
    from deepspeed.git_version_info import installed_ops
    if installed_ops.get("fused_adam"):
        from deepspeed.ops.adam import FusedAdam
        return FusedAdam
    return None


def _adam_class(device_type: str):
    """(class, extra kwargs) of the fastest Adam with decoupled weight decay on this device."""
    if device_type == "cpu":
        return AdamW, {"fused": True}  # one kernel over all tensors (the unfused one reads each step count on the host)
    if device_type != "cuda":
        return AdamW, {}
    fused = _prebuilt_fused_adam()
    if fused is not None:
        return type(fused.__name__, (SkippableStep, fused), {}), {"adam_w_mode": True}
    return AdamW, {"fused": True}  # torch's own fused CUDA kernel


def build_optimizer(run: OptimizerRun, model: torch.nn.Module) -> torch.optim.Optimizer:
    """Adam for `optimizer.type` Adam or AdamW. Both use decoupled weight decay: NeoX's "Adam" is apex's
    FusedAdam, whose default is AdamW mode. Norms, biases and kernel parameters get no decay."""
    groups = get_params_for_weight_decay_optimization(model, run.weight_decay)
    for group in groups:  # the scheduler sets weight_decay = wd * wd_mult on every step
        group["wd_mult"] = 1.0 if group["weight_decay"] > 0 else 0.0
    params = dict(run.params)
    params.pop("weight_decay", None)
    params["lr"] = run.lr
    if "betas" in params:
        params["betas"] = tuple(params["betas"])
    cls, extra = _adam_class(get_accelerator().device_name())
    return cls(groups, weight_decay=run.weight_decay, **params, **extra)


class AnnealingLR(OptimizerParamScheduler):
    """NeoX's learning-rate schedule on megatron-core's scheduler (which also keeps and restores its
    state). Warmup (linear from 0 over `warmup` x decay iters), `constant` and `cosine` (towards
    min_lr) are megatron-core's formulas, identical to NeoX's. NeoX's `linear` decays towards 0 and
    is floored at min_lr (megatron-core's lands on min_lr instead) and `exponential` halves over the
    decay and goes on decaying; those two are computed here. Past the decay, cosine stays at min_lr
    (NeoX's would climb back up)."""

    def get_lr(self, param_group: dict) -> float:
        in_warmup = self.lr_warmup_steps > 0 and self.num_steps <= self.lr_warmup_steps
        if self.lr_decay_style not in ("linear", "exponential") or in_warmup:
            return super().get_lr(param_group)
        progress = (self.num_steps - self.lr_warmup_steps) / (self.lr_decay_steps - self.lr_warmup_steps)
        if self.lr_decay_style == "linear":
            lr = self.max_lr * (1.0 - progress)
        else:
            lr = self.max_lr * math.exp(-0.693 * progress)  # NeoX's constant, ~ln 2
        return max(lr, self.min_lr)


def build_lr_scheduler(run: OptimizerRun, schedule: LrSchedule, optimizer: torch.optim.Optimizer) -> AnnealingLR:
    """NeoX's schedule over `lr_decay_iters` steps from the peak lr of `run`. On resume the step count comes
    from the checkpoint and everything else from the current config, so a run can be extended by raising
    train-iters."""
    decay_iters = max(1, schedule.decay_iters)
    warmup_iters = schedule.warmup * decay_iters  # a float, as in NeoX
    if warmup_iters >= decay_iters:
        raise NeoXArgsError(f"warmup {schedule.warmup} covers the whole decay ({decay_iters} steps): "
                            "warmup is a fraction of lr-decay-iters; set it below 1.")
    if schedule.min_lr > run.lr:
        raise NeoXArgsError(f"min_lr {schedule.min_lr} is above the peak learning rate "
                            f"optimizer.params.lr {run.lr}; lower min_lr.")
    return AnnealingLR(
        optimizer, init_lr=0.0, max_lr=run.lr, min_lr=schedule.min_lr,
        lr_warmup_steps=warmup_iters, lr_decay_steps=decay_iters, lr_decay_style=schedule.decay_style,
        start_wd=run.weight_decay, end_wd=run.weight_decay, wd_incr_steps=decay_iters,
        wd_incr_style="constant", use_checkpoint_opt_param_scheduler=False, override_opt_param_scheduler=True)
