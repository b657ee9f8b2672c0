"""Hostile inputs, round 2 (issue 24): runs that cannot pass as finished (row 8), a disk that fills up
during a save (row 15), evaluation lengths too short for a probe (row 4). In-process trainings (tiny_args) for each
rule (through the entry points, where the exit status is the point: tests/e2e/hostile/test_hostile_training.py)."""
import errno
import math
import os

import numpy as np
import pytest
import torch

from megatron.probes import kv_retrieval, passkey
from megatron.probes.common import ProbeError
from megatron.evaluation.driver import evaluate_run
from megatron.run.preflight import SaveFolderLock
from megatron.tokenizer.tokenizer import ByteLevelTokenizer
from megatron.training.loop import TrainingError
from tests.support.hostile import BLOWN_UP_LR, saved
from tests.support.training import pretrain, tiny_args


# ----------------------------------------------------- row 8: a run that learned nothing is not finished
def test_blown_up_weights_are_never_saved(stdlib_data, tmp_path):
    # lr 1e30: step 1 has a finite loss and leaves finite weights of ~1e30, which give NaN/inf once used.
    args = tiny_args(stdlib_data, tmp_path, train_iters=5, checkpoint_factor=1, **BLOWN_UP_LR)
    with pytest.raises(TrainingError, match=r"training diverged: the weights after step 1 .* so they are not "
                                            r"saved; no checkpoint was saved in .*ckpt\. Lower the learning rate"):
        pretrain(args)
    assert "latest" not in saved(tmp_path) and not [n for n in saved(tmp_path) if n.startswith("global_step")]


def test_run_ending_on_nan_loss_fails_before_the_bad_step_limit(stdlib_data, tmp_path):
    # Fewer steps than max-consecutive-bad-steps: the run reaches train-iters on a NaN loss.
    args = tiny_args(stdlib_data, tmp_path, train_iters=4, max_consecutive_bad_steps=10, **BLOWN_UP_LR)
    with pytest.raises(TrainingError, match=r"the run ended at step 4 on a NaN/inf loss \(3 skipped step\(s\) in a "
                                            r"row; .*no checkpoint was saved in"):
        pretrain(args)
    assert saved(tmp_path) == []


def test_diverging_after_a_good_checkpoint_keeps_it_latest(stdlib_data, tmp_path):
    pretrain(tiny_args(stdlib_data, tmp_path, train_iters=2))
    assert (tmp_path / "ckpt" / "latest").read_text() == "global_step2"
    # Resumed with the blown-up learning rate (no_load_optim: the config's lr, not the checkpoint's schedule).
    args = tiny_args(stdlib_data, tmp_path, train_iters=6, checkpoint_factor=1, no_load_optim=True, **BLOWN_UP_LR)
    with pytest.raises(TrainingError, match=r"the weights after step 3 .*the last checkpoint is step 2 "):
        pretrain(args)
    assert (tmp_path / "ckpt" / "latest").read_text() == "global_step2"
    assert saved(tmp_path) == ["global_step2", "latest"]


def test_every_step_skipped_is_a_failure_and_names_no_checkpoint(stdlib_data, tmp_path):
    # init-method-std 1e30: the very first loss is NaN; nothing trains, nothing is saved.
    args = tiny_args(stdlib_data, tmp_path, train_iters=3, init_method_std=1e30)
    with pytest.raises(TrainingError) as caught:
        pretrain(args)
    message = str(caught.value)
    assert message.startswith("no step of this run was applied: all 3 step(s) up to step 3 had a NaN/inf loss")
    assert "no checkpoint was saved in" in message and "step 0" not in message
    assert saved(tmp_path) == []


def test_without_save_blown_up_weights_still_fail_the_run(stdlib_data, tmp_path):
    # One step: its loss is finite and nothing is skipped; only the weights show the divergence.
    args = tiny_args(stdlib_data, tmp_path, train_iters=1, save=None, load=None, **BLOWN_UP_LR)
    with pytest.raises(TrainingError, match=r"weights after step 1 .* \(`save` is not set\)"):
        pretrain(args)


def test_a_healthy_run_still_finishes(stdlib_data, tmp_path):
    result = pretrain(tiny_args(stdlib_data, tmp_path, train_iters=3))
    assert result.skipped_steps == 0 and math.isfinite(result.valid_loss)
    assert (tmp_path / "ckpt" / "latest").read_text() == "global_step3"


# --------------------------------------------------------------- row 15: the disk fills up during a save
def test_disk_full_mid_save_says_so_and_removes_what_it_wrote(stdlib_data, tmp_path, monkeypatch):
    real_save = torch.save

    def filling_up(obj, f, *args, **kwargs):  # the step-4 write starts, then the disk is full
        if ".global_step4.partial" in str(getattr(f, "name", f)):
            f.write(b"PK\x03\x04 half a file")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", filling_up)
    args = tiny_args(stdlib_data, tmp_path, train_iters=6, checkpoint_factor=2)
    with pytest.raises(TrainingError) as caught:
        pretrain(args)
    ckpt = tmp_path / "ckpt"
    assert str(caught.value) == (
        f"checkpoint step 4 could not be saved in {ckpt}: no space left on device (writing "
        f"{ckpt}/.global_step4.partial/mp_rank_00_model_states.pt). What it wrote was removed and `latest` still "
        "names global_step2. Free space on that file system (or give `save` a folder on another one), then resume "
        "from the last checkpoint.")
    assert saved(tmp_path) == ["global_step2", "latest"]  # no partial folder, no latest.tmp
    assert (ckpt / "latest").read_text() == "global_step2"


def test_taking_the_save_folder_removes_a_crashed_saves_partial_folder(tmp_path):
    partial = tmp_path / ".global_step4.partial"
    partial.mkdir()
    (partial / "mp_rank_00_model_states.pt").write_bytes(b"half a file")
    (tmp_path / ".global_step4.partial.notes").write_text("not a save's folder: kept")
    lock = SaveFolderLock(tmp_path)
    try:
        assert lock.acquire() is None
        assert not partial.exists() and (tmp_path / ".global_step4.partial.notes").exists()
    finally:
        lock.release()


def test_a_full_disk_at_start_up_is_one_paragraph(tmp_path, monkeypatch):
    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", full)
    lock = SaveFolderLock(tmp_path)
    assert lock.acquire() == (
        f"save folder {tmp_path}: no space left on device (writing {tmp_path}/.lock). Free space on that file "
        "system (or give `save` a folder on another one), then start the run again.")
    assert lock.fd is None and not (tmp_path / ".lock").exists()  # released


# ------------------------------------------------- row 4: every length's probe fit, before any is scored
@pytest.mark.parametrize("mode", ["kv-retrieval", "passkey"])
def test_a_length_too_short_for_the_probe_stops_before_any_length_is_scored(mode, stdlib_data, tmp_path, capsys):
    pretrain(tiny_args(stdlib_data, tmp_path, train_iters=1))
    shortest = {"kv-retrieval": 42, "passkey": 103}[mode]  # byte-level: needle(s), question, answer take 43, 104
    args = tiny_args(stdlib_data, tmp_path, eval_modes=["nonoverlap", mode], eval_lengths=[shortest, shortest - 1],
                     eval_chunks=2, eval_results_dir=str(tmp_path / "results"))
    capsys.readouterr()
    with pytest.raises(ProbeError, match=rf"^eval-lengths: length {shortest - 1} cannot hold the {mode} probe: .* "
                                         rf"Use eval-lengths of at least {shortest} with the {mode} mode\.$"):
        evaluate_run(args.evaluation_run())
    assert "L=" not in capsys.readouterr().out  # nothing scored, not even the length that fits
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").iterdir())


def test_every_short_length_is_named_at_once():
    tokenizer = ByteLevelTokenizer()
    stream = np.array(tokenizer.tokenize("filler text without the probe's words, " * 50))
    with pytest.raises(ProbeError, match=r"^eval-lengths: lengths 30, 41 cannot hold the kv-retrieval probe: its 3 "
                                         r"key-value pairs \(probe-kv-pairs\), question and answer take 43 tokens"):
        kv_retrieval.check_lengths(stream, tokenizer, [64, 30, 41], [0.0, 1.0], 2, 0, pairs=3)
    kv_retrieval.check_lengths(stream, tokenizer, [42, 64], [0.0, 1.0], 2, 0, pairs=3)  # these fit
    with pytest.raises(ProbeError, match=r"the evaluation stream has 1950 tokens, fewer than the 3899 filler tokens "
                                         r"of a length-4002 passkey sample"):
        passkey.check_lengths(stream, tokenizer, [128, 4002], [0.5], 1, 0)
