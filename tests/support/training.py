"""Helpers for the training, checkpoint and logging tests (no tests here): the tiny profile pointed
at the `stdlib_data` corpus slice (a session fixture in conftest.py)."""
import os
import pathlib
import socket
import subprocess
import sys

import torch

from megatron.neox_arguments import NeoXArgs

REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]
TINY = REPO_ROOT / "configs" / "tiny.yml"
KERPLE_LOG = REPO_ROOT / "configs" / "kerple_log.yml"
EVAL_TINY = REPO_ROOT / "configs" / "eval" / "tiny.yml"
# The GPU guide's multi-GPU command (docs/gpu/README.md), word for word: two ranks, each with half the tiny
# profile's micro-batch of 16. The two-rank launch test runs it on CPU (gloo), `make gpu-check` on two GPUs.
TWO_RANKS = ("deepy.py", "train.py", "configs/tiny.yml", "--set", "num_gpus=2",
             "--set", "train_micro_batch_size_per_gpu=8")


def tiny_overrides(data_prefix: str, folder, **overrides) -> dict:
    """configs/tiny.yml on the test corpus, checkpoints and logs in `folder`, small and quick."""
    values = {"data_path": data_prefix, "split": "90,8,2", "save": str(folder / "ckpt"), "load": str(folder / "ckpt"),
              "train_iters": 8, "log_interval": 4, "eval_interval": 1000, "eval_iters": 2,
              "checkpoint_factor": None, "keep_last_n_checkpoints": None, "tensorboard_dir": None}
    values.update(overrides)
    return values


def tiny_args(data_prefix: str, folder, **overrides) -> NeoXArgs:
    torch.set_num_threads(1)  # two shared cores; also keeps CPU float results reproducible
    return NeoXArgs.from_ymls([TINY], tiny_overrides(data_prefix, folder, **overrides))


def pretrain(args: NeoXArgs):
    """Train `args` as train.py does: this process joins its process group, then the run's records are built from
    the config (NeoXArgs.training_run) and megatron/training's pretrain takes them."""
    from megatron.training.loop import pretrain as pretrain_run
    args.join_process_group()
    return pretrain_run(args.training_run())


def free_port() -> int:
    """A port nobody listens on now (runs of other people on this machine use fixed ones too)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def set_flags(values: dict) -> list:
    """The same overrides as `--set key=value` command-line flags."""
    flags = []
    for key, value in values.items():
        text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
        flags += ["--set", f"{key}={text}"]
    return flags


LAUNCHER_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")


def child_environment() -> dict:
    """This environment minus the rank variables an in-process run set (a child is its own run)."""
    env = {k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}
    return {**env, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def run_script(argv: list, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *argv], cwd=REPO_ROOT, env=child_environment(), capture_output=True,
                          text=True, timeout=timeout)


def rows_one_step_trains(args, draw) -> tuple[set, set]:
    """(the rows of a learned position table that one train_step of `args` changes, the positions `draw()` gives
    from the generator state that step starts from): a position mode trains exactly the rows it draws."""
    from megatron.neox_arguments.to_training import step_run
    from megatron.tokenizer import build_tokenizer
    from megatron.training.loop import setup_model_and_optimizer, train_step
    args.join_process_group()
    vocab = build_tokenizer(args.tokenizer_run()).padded_vocab_size
    engine, optimizer = setup_model_and_optimizer(args.training_run(), vocab)[:2]
    table = engine.module.positional_embeddings()[0].embedding.weight
    before = table.detach().clone()
    tokens = torch.randint(0, 256, (2, args.seq_length), generator=torch.Generator().manual_seed(0))
    batch = {"tokens": tokens, "labels": tokens.roll(-1, 1), "loss_mask": torch.ones(2, args.seq_length)}
    state = torch.get_rng_state()
    expected = set(draw())
    torch.set_rng_state(state)  # the step draws from the same generator state
    train_step(step_run(args), engine, optimizer, iter([batch]), vocab)
    return set(torch.nonzero((table.detach() != before).any(dim=1)).squeeze(1).tolist()), expected


def four_step_losses(data_prefix: str, folder, **overrides) -> dict:
    """{step: loss} of four steps of the tiny profile, in-process, without dropout or checkpoints: runs that
    should follow the same path (ZeRO stages, gradient accumulation) compare these."""
    return pretrain(tiny_args(data_prefix, folder, train_iters=4, log_interval=4, save=None, load=None,
                              hidden_dropout=0.0, **overrides)).losses
