"""Evaluation results to the run's TensorBoard and Weights & Biases, when those are on (tensorboard-dir,
use-wandb), as GPT-NeoX users read training there: perplexity against evaluation length as a chart, one
series per mode.

    eval/<mode>/ppl   eval/<mode>/loss   at step = evaluation length L

TensorBoard draws each tag against its step, here the length; W&B is told that `eval/*` is plotted
against `eval/length`. W&B is started as the training monitor starts it (megatron/run/wandb_run.py)."""


from .run_keys import Dashboards


def log_evaluation(dashboards: Dashboards, records: list[dict]) -> list[str]:
    """Write the scored `records` (skipped ones have no number) where the run turns logging on;
    return where they went, for the one line evaluate.py prints."""
    scored = [r for r in records if "skipped" not in r and r.get("loss") is not None]
    went = []
    if not scored:
        return went
    if dashboards.tensorboard_dir:
        from torch.utils.tensorboard import SummaryWriter
        writer = SummaryWriter(log_dir=dashboards.tensorboard_dir)
        try:
            for record in sorted(scored, key=lambda r: r["length"]):
                writer.add_scalar(f"eval/{record['mode']}/ppl", record["ppl"], record["length"])
                writer.add_scalar(f"eval/{record['mode']}/loss", record["loss"], record["length"])
        finally:
            writer.close()
        went.append(f"TensorBoard {dashboards.tensorboard_dir}")
    if dashboards.wandb is not None:
        from megatron.run.wandb_run import start_wandb
        run = start_wandb(dashboards.wandb)
        try:
            run.define_metric("eval/length")
            run.define_metric("eval/*", step_metric="eval/length")
            for record in sorted(scored, key=lambda r: r["length"]):
                run.log({"eval/length": record["length"], f"eval/{record['mode']}/ppl": record["ppl"],
                         f"eval/{record['mode']}/loss": record["loss"]})
        finally:
            run.finish()
        went.append(f"W&B project {dashboards.wandb.project}")
    return went
