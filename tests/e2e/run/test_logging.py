"""Logging: TensorBoard event files and an offline W&B run are read back and hold the training loss
and the effective kernel parameters per head; the console shows a progress bar on a terminal."""
import glob

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from megatron.checkpoint.checkpointing import load_model_weights
from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.tokenizer import build_tokenizer
from tests.support.wandb import wandb_history
from tests.support.training import pretrain, tiny_args
def test_tensorboard_and_wandb_hold_loss_and_kernel_parameters(stdlib_data, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    args = tiny_args(stdlib_data, tmp_path, train_iters=4, log_interval=2, use_wandb=True,
                     wandb_project="tests", log_dir=str(tmp_path / "logs"), tensorboard_dir=str(tmp_path / "tb"))
    result = pretrain(args)
    interval_means = {2: (result.losses[1] + result.losses[2]) / 2, 4: (result.losses[3] + result.losses[4]) / 2}

    # The kernel parameters of the trained model, from its checkpoint (written at step 4).
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size))
    load_model_weights(args.inference_run(), model)
    kernel = {name: values.float() for name, values in model.positional_embeddings()[0].kernel_parameters().items()}
    assert set(kernel) == {"r1", "r2"}  # KERPLE-log

    tensorboard = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    tensorboard.Reload()
    scalars = {tag: {e.step: e.value for e in tensorboard.Scalars(tag)} for tag in tensorboard.Tags()["scalars"]}
    assert scalars["train/loss"] == pytest.approx(interval_means, rel=1e-6)
    for name, values in kernel.items():
        assert scalars[f"pos_emb/{name}/mean"][4] == pytest.approx(values.mean().item(), rel=1e-6)
        assert scalars[f"pos_emb/{name}/min"][4] == pytest.approx(values.min().item(), rel=1e-6)
        assert scalars[f"pos_emb/{name}/max"][4] == pytest.approx(values.max().item(), rel=1e-6)
        for head in range(args.num_attention_heads):
            assert scalars[f"pos_emb/{name}/head{head}"][4] == pytest.approx(values[head].item(), rel=1e-6)
    for tag in ("train/lr", "train/grad_norm", "train/tokens_per_sec", "train/ppl", "valid/loss", "test/loss"):
        assert tag in scalars

    (run_file,) = glob.glob(str(tmp_path / "logs" / "wandb" / "offline-run-*" / "run-*.wandb"))
    history = {row["_step"]: row for row in wandb_history(run_file)}
    assert {step: history[step]["train/loss"] for step in (2, 4)} == pytest.approx(interval_means, rel=1e-9)
    for tag in ("pos_emb/r1/mean", "pos_emb/r2/max", "pos_emb/r1/head3", "train/lr", "valid/loss"):
        assert history[4][tag] == pytest.approx(scalars[tag][4], rel=1e-6)


