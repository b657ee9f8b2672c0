"""Evaluation results to the run's TensorBoard and Weights & Biases, when those are on (tensorboard-dir,
use-wandb), as GPT-NeoX users read training there: perplexity against evaluation length as a chart, one
series per mode.

    eval/<mode>/ppl   eval/<mode>/loss   at step = evaluation length L

TensorBoard draws each tag against its step, here the length; W&B is told that `eval/*` is plotted
against `eval/length`. W&B is started as the training monitor starts it (megatron/run/monitor.py)."""


def log_evaluation(neox_args, records: list[dict]) -> list[str]:
    """Write the scored `records` (skipped ones have no number) where the config turns logging on;
    return where they went, for the one line evaluate.py prints."""
    scored = [r for r in records if "skipped" not in r and r.get("loss") is not None]
    went = []
    if not scored:
        return went
    if neox_args.tensorboard_dir:
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(log_dir=neox_args.tensorboard_dir)
        try:
            for record in sorted(scored, key=lambda r: r["length"]):
                writer.add_scalar(f"eval/{record['mode']}/ppl", record["ppl"], record["length"])
                writer.add_scalar(f"eval/{record['mode']}/loss", record["loss"], record["length"])
        finally:
            writer.close()
        went.append(f"TensorBoard {neox_args.tensorboard_dir}")
    if neox_args.use_wandb:
        from megatron.run.monitor import _start_wandb
        run = _start_wandb(neox_args)
        try:
            run.define_metric("eval/length")
            run.define_metric("eval/*", step_metric="eval/length")
            for record in sorted(scored, key=lambda r: r["length"]):
                run.log({"eval/length": record["length"], f"eval/{record['mode']}/ppl": record["ppl"],
                         f"eval/{record['mode']}/loss": record["loss"]})
        finally:
            run.finish()
        went.append(f"W&B project {neox_args.wandb_project}")
    return went
