"""Logging: TensorBoard event files and an offline W&B run are read back and hold the training loss
and the effective kernel parameters per head; the console shows a progress bar on a terminal."""
import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

import pytest
import torch

from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.run.monitor import kernel_scalars
from megatron.tokenizer import build_tokenizer
from tests.support.training import (
    REPO_ROOT, TINY, child_environment, set_flags, tiny_args, tiny_overrides)


def test_kernel_scalars_name_each_layer_when_not_shared(stdlib_data, tmp_path):
    args = tiny_args(stdlib_data, tmp_path, pos_emb_per_layer=True)
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size))
    with torch.no_grad():
        for p in model.positional_embeddings()[1].parameters():  # make layer 1 differ from layer 0
            p.add_(1.0)
    scalars = kernel_scalars(model)
    assert {k.split("/")[1] for k in scalars} == {"layer0", "layer1"}
    for layer, pe in enumerate(model.positional_embeddings()):
        r1 = pe.kernel_parameters()["r1"]
        assert scalars[f"pos_emb/layer{layer}/r1/max"] == pytest.approx(r1.max().item(), rel=1e-6)
    assert scalars["pos_emb/layer1/r1/mean"] != scalars["pos_emb/layer0/r1/mean"]


@pytest.mark.slow
def test_progress_bar_on_a_terminal(stdlib_data, tmp_path):
    overrides = tiny_overrides(stdlib_data, tmp_path, train_iters=6, log_interval=3, save=None, load=None)
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))  # a 120-column terminal
    process = subprocess.Popen([sys.executable, "train.py", str(TINY), *set_flags(overrides)], cwd=REPO_ROOT,
                               env=child_environment(), stdin=follower, stdout=follower, stderr=subprocess.DEVNULL)
    os.close(follower)
    output = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        output += chunk
    assert process.wait(timeout=120) == 0, output.decode(errors="replace")
    text = output.decode(errors="replace")
    assert "6/6 [" in text and "step/s" in text  # tqdm's bar, rate in steps
    assert "step 3/6 | loss" in text  # the log lines are printed above the bar
