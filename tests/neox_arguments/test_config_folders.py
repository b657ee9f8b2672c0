"""Where each shipped config keeps its checkpoints: every paper config a folder of its own, so training one
method after another never resumes or refuses the other's; tiny.yml none (a run names its run-dir, which
files its checkpoints, logs, TensorBoard and results); an evaluation's results beside what it loads."""
import pathlib

import pytest

from megatron.model.positional_embeddings import available
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.yaml_loader import load_config_files, normalise_key


CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"


PAPER = sorted(p for p in CONFIGS.glob("*.yml") if "extends: [162M.yml, local_setup.yml]" in p.read_text())


def test_every_method_has_a_paper_config_with_its_own_folder():
    assert {config.stem for config in PAPER} <= set(available()), "a paper config names no registered method"
    folders = {}
    for config in PAPER:
        args = NeoXArgs.from_ymls([config])
        assert args.save == args.load == f"checkpoints/{config.stem}", config.name
        assert args.config_sources["save"] == f"{config}:5", "set by the method's own file"
        folders.setdefault(args.save, []).append(config.name)
    assert all(len(names) == 1 for names in folders.values()), folders
    # A method a user adds as one file (docs/positional-methods.md) has no paper config, and needs none to
    # train on configs/tiny.yml; the shipped methods each have theirs, checked above.
    without = sorted(set(available()) - {config.stem for config in PAPER})
    if without:
        pytest.skip(f"methods with no configs/<method>.yml (added after checkout?): {without}")


def test_local_setup_names_no_checkpoint_folder():
    """A folder there would be shared by every paper config (or silently overridden by each)."""
    values, _, _ = load_config_files([CONFIGS / "local_setup.yml"])
    assert not {"save", "load"} & {normalise_key(k) for k in values}


def test_tiny_names_no_folder_so_the_demo_and_a_users_run_never_meet():
    """tiny.yml is a model and training profile: the demo passes its own folders (the ones the docs name),
    and a user's command names a run-dir, so a tiny.yml command is the same before and after `make demo`."""
    args = NeoXArgs.from_ymls([CONFIGS / "tiny.yml"])
    assert (args.run_dir, args.save, args.load, args.tensorboard_dir, args.log_dir) == (None,) * 5
    assert args.eval_results_dir == "eval_results"  # the default: nothing loaded, nothing to put it beside
    makefile = (CONFIGS.parent / "Makefile").read_text()
    demo = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "--set save=checkpoints/tiny/$$method" in demo and "--set load=checkpoints/tiny/$$method" in demo


def test_run_dir_files_every_output_under_one_folder_and_a_key_given_wins(tmp_path):
    run = tmp_path / "runs" / "alibi"
    args = NeoXArgs.from_ymls([CONFIGS / "tiny.yml"], {"run_dir": str(run), "pos_emb": "alibi"})
    assert (args.save, args.load, args.tensorboard_dir, args.log_dir, args.eval_results_dir) == (
        f"{run}/checkpoints", f"{run}/checkpoints", f"{run}/tensorboard", f"{run}/logs", f"{run}/eval_results")
    assert args.config_sources["save"] == "run-dir (command line)"
    assert "run_dir" not in NeoXArgs.trained_keys()  # where a run is filed is no part of what it trained
    # An explicit key wins, a null one included (no TensorBoard); the others still follow run-dir.
    args = NeoXArgs.from_ymls([CONFIGS / "tiny.yml"], {"run_dir": str(run), "save": str(tmp_path / "elsewhere"),
                                                       "tensorboard_dir": None})
    assert (args.save, args.load, args.tensorboard_dir) == (str(tmp_path / "elsewhere"), f"{run}/checkpoints", None)
    assert args.config_sources["save"] == "command line"


@pytest.mark.parametrize("layout", ["run-dir", "plain"])
def test_results_of_an_evaluation_go_beside_the_checkpoint_it_loads(tmp_path, layout):
    """Never into a folder another run shares: into the loaded run's folder (the one above a run-dir's
    `checkpoints`), or into the checkpoint folder itself when it is no run folder's."""
    load = tmp_path / "runs" / "mine" / "checkpoints" if layout == "run-dir" else tmp_path / "ckpt"
    args = NeoXArgs.from_ymls([CONFIGS / "tiny.yml"], {"load": str(load)})
    beside = tmp_path / "runs" / "mine" if layout == "run-dir" else load
    assert args.eval_results_dir == str(beside / "eval_results")
    assert args.config_sources["eval_results_dir"] == "beside the checkpoint load names (command line)"


def test_a_checkpoints_stored_config_never_files_this_process(tmp_path):
    """run-dir is one of the keys that decide where a process writes: a checkpoint's stored config, given
    as a config file, does not set it (it was written by whoever sent the checkpoint)."""
    step = tmp_path / "ckpt" / "global_step8"
    step.mkdir(parents=True)
    stored = step / "resolved_config.yml"
    stored.write_text((CONFIGS / "tiny.yml").read_text().replace("{", '{\n  "run-dir": "/tmp/their-folder",', 1))
    args = NeoXArgs.from_ymls([stored], {"load": str(tmp_path / "ckpt")})
    assert args.run_dir is None and args.save is None
    assert args.eval_results_dir == str(tmp_path / "ckpt" / "eval_results")  # beside the load the user gave
    # Nor does its `load` (read from, as always): results beside it would be a folder the sender chose.
    stored.write_text(stored.read_text().replace("{", '{\n  "load": "/tmp/their-folder/checkpoints",', 1))
    args = NeoXArgs.from_ymls([stored])
    assert args.load == "/tmp/their-folder/checkpoints" and args.eval_results_dir == "eval_results"


def test_dry_run_shows_the_resolved_folders_and_where_each_came_from(tmp_path, capsys, repo_root, monkeypatch):
    import deepy
    monkeypatch.chdir(repo_root)
    assert deepy.main(["train.py", "configs/tiny.yml", "--dry-run", "--set", f"run-dir={tmp_path}/run",
                       "--set", f"tensorboard-dir={tmp_path}/tb"]) == 0
    outputs = capsys.readouterr().out.split("# Outputs", 1)[1].splitlines()[1:]
    rows = {line.split()[0]: line.split(None, 2)[1:] for line in outputs if line.strip()}
    assert rows["save"] == [f"{tmp_path}/run/checkpoints", "# run-dir (command line)"]
    assert rows["eval-results-dir"] == [f"{tmp_path}/run/eval_results", "# run-dir (command line)"]
    assert rows["tensorboard-dir"] == [f"{tmp_path}/tb", "# command line"]
