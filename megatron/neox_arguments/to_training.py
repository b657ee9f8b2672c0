"""The one place a run's config becomes what training reads (megatron/training/run_keys.py's `TrainingRun`, with
the monitor's `MonitorRun` of megatron/run/run_keys.py): megatron/training/ never reads the run config itself."""
from megatron.run.run_keys import MonitorRun
from megatron.training.run_keys import LoopRun, LrSchedule, OptimizerRun, RunBanner, StepRun, TrainingRun

from .to_checkpoint import checkpoint_run
from .to_data import data_run
from .to_evaluation import wandb_run
from .to_preflight import preflight_run
from .to_tokenizer import tokenizer_run
from .values import as_tuple


def training_run(neox_args) -> TrainingRun:
    """What train.py's pretrain() takes from `neox_args`, as the run is now: build it once the process group is
    joined (NeoXArgs.join_process_group), so that the data's share and the stored config are this rank's."""
    return TrainingRun(
        model=neox_args.model, tokenizer=tokenizer_run(neox_args), data=data_run(neox_args),
        checkpoint=checkpoint_run(neox_args), preflight=preflight_run(neox_args),
        optimizer=optimizer_run(neox_args), lr_schedule=lr_schedule(neox_args), step=step_run(neox_args),
        loop=loop_run(neox_args), monitor=monitor_run(neox_args), banner=run_banner(neox_args),
        deepspeed_config=neox_args.deepspeed_config(), compile_blocks=neox_args.compile_blocks, rank=neox_args.rank)


def optimizer_run(neox_args) -> OptimizerRun:
    return OptimizerRun(params=dict(neox_args.optimizer.get("params", {})), lr=neox_args.lr,
                        weight_decay=neox_args.weight_decay)


def lr_schedule(neox_args) -> LrSchedule:
    return LrSchedule(decay_style=neox_args.lr_decay_style, decay_iters=neox_args.lr_decay_iters,
                      warmup=neox_args.warmup, min_lr=neox_args.min_lr)


def step_run(neox_args) -> StepRun:
    return StepRun(
        gradient_accumulation_steps=neox_args.gradient_accumulation_steps,
        gradient_clipping=neox_args.gradient_clipping, sequence_parallel_size=neox_args.sequence_parallel_size,
        random_positions=neox_args.random_positions, pose_target_length=neox_args.pose_target_length,
        pose_chunks=neox_args.pose_chunks, reset_attention_mask=neox_args.reset_attention_mask,
        reset_position_ids=neox_args.reset_position_ids, eod_mask_loss=neox_args.eod_mask_loss)


def loop_run(neox_args) -> LoopRun:
    return LoopRun(log_interval=neox_args.log_interval, checkpoint_factor=neox_args.checkpoint_factor,
                   extra_save_iters=as_tuple(neox_args.extra_save_iters) or (),
                   exit_interval=neox_args.exit_interval,
                   max_consecutive_bad_steps=neox_args.max_consecutive_bad_steps)


def monitor_run(neox_args) -> MonitorRun:
    return MonitorRun(rank=neox_args.rank, tensorboard_dir=neox_args.tensorboard_dir,
                      wandb=wandb_run(neox_args) if neox_args.use_wandb else None, train_iters=neox_args.train_iters,
                      train_batch_size=neox_args.train_batch_size, seq_length=neox_args.seq_length)


def run_banner(neox_args) -> RunBanner:
    return RunBanner(
        run_name=neox_args.run_name, run_dir=neox_args.run_dir, save=neox_args.save, pos_emb=neox_args.pos_emb,
        trained={key: getattr(neox_args, key) for key in neox_args.trained_keys()},
        attention_window=neox_args.attention_window,
        precision=neox_args.precision, world_size=neox_args.world_size, seq_length=neox_args.seq_length,
        reset_attention_mask=neox_args.reset_attention_mask, reset_position_ids=neox_args.reset_position_ids)
