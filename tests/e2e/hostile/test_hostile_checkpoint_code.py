"""Hostile inputs, round 3 (issue 40, rows 1, 2 and 4): a received checkpoint never runs code and never
decides where a process writes. An object whose unpickling creates a folder (the marker) is planted in a
real checkpoint's files; every entry point that reads a checkpoint refuses it in one paragraph, and the
marker never appears -- the object was not constructed, not even for a checkpoint then refused."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import torch

from tests.support import neox_fork as fork
from tests.support.hostile import assert_clear_error, entry_point_in_process
from tests.support.training import REPO_ROOT, TINY, child_environment, set_flags, tiny_overrides


GENERATION = REPO_ROOT / "configs" / "text_generation.yml"


class Planted:
    """Unpickling this calls os.makedirs(marker): what any code planted in a file could do instead."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return os.makedirs, (self.marker,)


def plant(path: pathlib.Path, marker: pathlib.Path) -> None:
    state = torch.load(path, weights_only=False)  # the test's own file: trusted here, and only here
    state["planted"] = Planted(marker)
    torch.save(state, path)
    assert not marker.exists()


def launched(*argv, timeout=300):
    return subprocess.run([sys.executable, *map(str, argv)], cwd=REPO_ROOT, env=child_environment(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def trained(stdlib_data, tmp_path_factory):
    """Two steps of the tiny profile with ZeRO stage 1, so the optimizer has a file of its own."""
    folder = tmp_path_factory.mktemp("trained")
    overrides = tiny_overrides(stdlib_data, folder, train_iters=2, zero_optimization="{stage: 1}")
    result = launched("train.py", TINY, *set_flags(overrides))
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert (folder / "ckpt" / "global_step2" / "zero_pp_rank_0_mp_rank_00_optim_states.pt").is_file()
    return folder / "ckpt", stdlib_data


def received(trained, tmp_path, file="mp_rank_00_model_states.pt"):
    """A copy of the trained checkpoint with the object planted in `file`; (save folder, marker)."""
    source, _ = trained
    copy = tmp_path / "received"
    shutil.copytree(source, copy)
    marker = tmp_path / "code-ran"
    plant(copy / "global_step2" / file, marker)
    return copy, marker


REFUSAL = ["holds an object of type 'os.makedirs', not plain data", "it was not read"]


# evaluate.py and train.py run their own main in this process (tests/support/hostile.py entry_point_in_process):
# other launches of theirs show a refusal reaching the terminal; generate.py, eval.py and the tools are launched.
IN_PROCESS = ("evaluate.py", "train.py resume", "train.py finetune")


def entry_point(name, ckpt, data, tmp_path, in_process=None):
    resolved = ckpt / "global_step2" / "resolved_config.yml"
    if name in IN_PROCESS:
        script = lambda *argv: entry_point_in_process(*in_process, *argv)  # noqa: E731
    else:
        script = launched
    if name == "evaluate.py":
        return script("evaluate.py", resolved, "--set", f"load={ckpt}", "--set", "eval_lengths=[64]",
                      "--set", "eval_chunks=2", "--set", f"eval_results_dir={tmp_path / 'results'}")
    if name == "generate.py":
        return script("generate.py", resolved, GENERATION, "--set", f"load={ckpt}", "--set", "maximum_tokens=4",
                      "--set", f"sample-output-file={tmp_path / 'samples.jsonl'}")
    if name == "eval.py":
        (tmp_path / "tasks").mkdir()
        return script("eval.py", resolved, "--eval_tasks", "local_mc", "--set", f"load={ckpt}",
                      "--set", f"eval-task-paths=[{tmp_path / 'tasks'}]", "--set", f"eval_results_dir={tmp_path / 'r'}")
    if name == "convert_to_hf.py":
        return script("tools/ckpts/convert_to_hf.py", "--input_dir", ckpt / "global_step2",
                      "--output_dir", tmp_path / "hf")
    if name == "train.py resume":
        return script("train.py", TINY, *set_flags(tiny_overrides(data, ckpt.parent, train_iters=4,
                                                                 zero_optimization="{stage: 1}",
                                                                 save=str(ckpt), load=str(ckpt))))
    if name == "train.py finetune":
        return script("train.py", TINY, *set_flags(tiny_overrides(data, tmp_path / "tuned", train_iters=2,
                                                                 finetune=True, load=str(ckpt))))
    raise AssertionError(name)


ENTRY_POINTS = ["evaluate.py", "generate.py", "eval.py", "convert_to_hf.py", "train.py resume", "train.py finetune"]


@pytest.mark.parametrize("name", ENTRY_POINTS)
def test_an_object_planted_in_the_model_states_is_never_constructed(name, trained, tmp_path, monkeypatch, capsys):
    ckpt, marker = received(trained, tmp_path)
    result = entry_point(name, ckpt, trained[1], tmp_path, (monkeypatch, capsys))
    assert not marker.exists(), f"{name} ran the planted code"
    assert_clear_error(result, str(ckpt / "global_step2" / "mp_rank_00_model_states.pt"), *REFUSAL)


@pytest.mark.parametrize("name", ["train.py resume", "evaluate.py"])
def test_an_object_planted_in_deepspeeds_optimizer_file_is_never_constructed(name, trained, tmp_path, monkeypatch,
                                                                               capsys):
    """Only DeepSpeed reads this file (when resuming): it is checked as data before DeepSpeed opens it.
    evaluate.py never reads it, and so evaluates the weights as usual."""
    optimizer_file = "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    ckpt, marker = received(trained, tmp_path, optimizer_file)
    result = entry_point(name, ckpt, trained[1], tmp_path, (monkeypatch, capsys))
    assert not marker.exists(), f"{name} ran the planted code"
    if name == "evaluate.py":
        assert result.returncode == 0, result.stderr[-3000:]
    else:
        assert_clear_error(result, str(ckpt / "global_step2" / optimizer_file), *REFUSAL)
        assert "step 3/" not in result.stdout


def test_a_resume_reads_every_file_deepspeed_wrote_as_data(trained, tmp_path):
    """The files plain_load allows are all DeepSpeed and this project write: a resume of an untouched
    ZeRO-1 checkpoint still loads everything (model, optimizer, RNG) and goes on."""
    source, data = trained
    shutil.copytree(source, tmp_path / "ckpt")
    result = launched("train.py", TINY, *set_flags(tiny_overrides(data, tmp_path, train_iters=4,
                                                                  zero_optimization="{stage: 1}")))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from step 2" in result.stdout and "step 4/4" in result.stdout


def test_import_neox_refuses_a_planted_object(tmp_path):
    cfg = {"layers": 2, "hidden": 32, "heads": 4, "vocab": 258, "seq": 16, "max_positions": 128, "untied": True,
           "rotary_pct": 0.5, "buckets": 8, "max_distance": 32}
    fork.write_fork_checkpoint(tmp_path / "fork", fork.make_weights("t5", cfg, 0), cfg, "t5")
    marker = tmp_path / "code-ran"
    states = tmp_path / "fork" / "global_step7" / "mp_rank_00_model_states.pt"
    plant(states, marker)
    result = launched("-m", "tools.ckpts.import_neox", tmp_path / "fork", tmp_path / "ours")
    assert not marker.exists(), "import_neox.py ran the planted code"
    assert_clear_error(result, str(states), *REFUSAL)
    assert not (tmp_path / "ours").exists()


# ------------------------------------------------------------------ row 4: a stored config is data
def test_a_checkpoints_stored_config_does_not_choose_where_evaluate_writes(trained, tmp_path, monkeypatch, capsys):
    source, _ = trained
    ckpt = tmp_path / "received"
    shutil.copytree(source, ckpt)
    resolved = ckpt / "global_step2" / "resolved_config.yml"
    elsewhere = tmp_path / "elsewhere"
    text = "".join(line for line in resolved.read_text().splitlines(keepends=True)
                   if not line.startswith(("eval_results_dir", "log_dir", "save", "tensorboard_dir", "load")))
    resolved.write_text(text + f"load: {json.dumps(str(ckpt))}\nlog_dir: {json.dumps(str(elsewhere / 'logs'))}\n"
                        f"eval_results_dir: {json.dumps(str(elsewhere / 'results'))}\n"
                        f"save: {json.dumps(str(elsewhere / 'save'))}\n")
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # evaluate.py run from another folder than the repository's
    result = entry_point_in_process(monkeypatch, capsys, "evaluate.py", resolved, "--set", "eval_lengths=[64]",
                                    "--set", "eval_chunks=2")
    assert result.returncode == 0, result.stderr[-3000:]
    assert not elsewhere.exists()
    note = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert note == [f"note: eval-results-dir, log-dir, save from {resolved} not applied: a checkpoint's stored "
                    "config gives the model and data, never where this process writes (set them in your own "
                    "config or with --set)."], result.stderr[-2000:]
    assert len(list((workdir / "eval_results").glob("*.json"))) == 1  # the default, as the user's config says
