"""First contact (issue 23): a fresh clone's first command fails in a second with one paragraph naming
the missing file, the key and line that set it, and the command that creates it, before any rank
starts; a rank's own config mistake reaches the user without DeepSpeed's launcher noise."""
import os

import pytest

import deepy
from megatron.neox_arguments import NeoXArgs
from megatron.run.preflight import PreflightError, check_inputs, input_problems
from megatron.tokenizer import TokenizerError
from tests.support.training import KERPLE_LOG, REPO_ROOT, TINY


def args(config=TINY, **overrides) -> NeoXArgs:
    return NeoXArgs.from_ymls([config], overrides)


def problems(neox_args, script="train.py") -> str:
    return " ".join(p for p in input_problems(neox_args.preflight_run(), script) if p)


def write_pair(prefix):
    for extension in (".bin", ".idx"):
        with open(str(prefix) + extension, "wb") as f:
            f.write(b"x")


# ------------------------------------------------------------------------------------- the check
def test_a_fresh_clone_is_told_what_creates_the_paper_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative paths read from here: nothing of data/ exists
    problem = problems(args(KERPLE_LOG))
    assert problem.startswith(f"this run reads files that do not exist (relative paths are read from {tmp_path}): ")
    assert "data-path data/github/github_text_document.bin and .idx (set by " in problem
    for key, line in (("data-path", 4), ("vocab-file", 6), ("merge-file", 7)):
        assert f"{key} " in problem and f"local_setup.yml:{line}" in problem
    assert problem.count("python tools/datasets/prepare_data.py github") == 1  # one command, said once
    assert "load" not in problem  # `checkpoints` does not exist yet: the first launch starts at step 0


def test_the_built_in_corpus_is_made_by_make_data_and_own_files_by_preprocess_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    problem = problems(args())
    assert "data-path data/stdlib/stdlib_text_document.bin and .idx (set by " in problem
    assert "tiny.yml:23" in problem and "`make data` creates it" in problem
    problem = problems(args(data_path=str(tmp_path / "mine" / "corpus")))
    assert f"data-path {tmp_path}/mine/corpus.bin and .idx (set by command line)" in problem
    assert "tools/datasets/preprocess_data.py" in problem and "relative paths" not in problem


def test_half_a_pair_and_per_split_paths_are_named_exactly(tmp_path):
    write_pair(tmp_path / "train")
    write_pair(tmp_path / "test")
    os.remove(tmp_path / "test.idx")
    neox_args = args(data_path=None, train_data_paths=[str(tmp_path / "train")],
                     valid_data_paths=[str(tmp_path / "valid")], test_data_paths=[str(tmp_path / "test")])
    problem = problems(neox_args)
    assert f"valid-data-paths {tmp_path}/valid.bin and .idx" in problem
    assert f"test-data-paths {tmp_path}/test.idx (set by command line)" in problem
    assert "train-data-paths" not in problem
    # evaluate.py reads its eval-split only (test by default)
    assert "valid-data-paths" not in problems(neox_args, "evaluate.py")


def test_every_input_present_passes_and_the_tokenizer_is_built(tmp_path):
    write_pair(tmp_path / "corpus")
    checked = check_inputs(args(data_path=str(tmp_path / "corpus"), load=str(tmp_path / "ckpt")).preflight_run(),
                           "train.py")
    assert [i.key for i in checked] == ["data-path"]
    unknown = "tests/scripts/report_rank.py"
    assert check_inputs(args(data_path=str(tmp_path / "nope")).preflight_run(), unknown) == []


def test_gpt2_without_its_files_is_refused_by_the_tokenizer(tmp_path):
    write_pair(tmp_path / "corpus")
    with pytest.raises(TokenizerError, match="needs `vocab-file`"):
        check_inputs(args(data_path=str(tmp_path / "corpus"), tokenizer_type="GPT2BPETokenizer").preflight_run(),
                     "train.py")


def test_only_the_files_the_tokenizer_type_opens_are_checked(tmp_path):
    write_pair(tmp_path / "corpus")
    common = {"data_path": str(tmp_path / "corpus"), "vocab_file": "nowhere/tokenizer.json",
              "merge_file": "nowhere/merges.txt"}
    problem = problems(args(tokenizer_type="HFTokenizer", **common))
    assert "vocab-file nowhere/tokenizer.json (set by command line)" in problem and "merge-file" not in problem
    assert problems(args(tokenizer_type="ByteLevelTokenizer", **common)) == ""


def test_resuming_into_an_empty_or_missing_folder_starts_at_step_0(tmp_path):
    write_pair(tmp_path / "corpus")
    common = {"data_path": str(tmp_path / "corpus")}
    assert problems(args(load=str(tmp_path / "missing"), **common)) == ""
    (tmp_path / "empty").mkdir()
    assert problems(args(load=str(tmp_path / "empty"), **common)) == ""
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "events.log").write_text("")  # a folder holding no checkpoint yet
    assert problems(args(load=str(tmp_path / "other"), **common)) == ""


def test_a_checkpoint_asked_for_but_not_there_is_refused(tmp_path):
    write_pair(tmp_path / "corpus")
    common = {"data_path": str(tmp_path / "corpus")}
    (tmp_path / "empty").mkdir()
    assert "has no checkpoint global_step3 (config key `iteration`)" in problems(
        args(load=str(tmp_path / "empty"), iteration=3, **common))
    assert "has no `latest` file" in problems(args(load=str(tmp_path / "empty"), finetune=True, **common))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "global_step3").mkdir()
    (tmp_path / "broken" / "latest").write_text("global_step4")
    assert problems(args(load=str(tmp_path / "broken"), **common)).startswith(
        f"command line: {tmp_path}/broken/latest names 'global_step4', which is not in")
    (tmp_path / "file").write_text("")
    assert f"load {tmp_path}/file is a file, not a checkpoint folder" in problems(
        args(load=str(tmp_path / "file"), **common))


def test_evaluation_needs_a_checkpoint(tmp_path):
    write_pair(tmp_path / "corpus")
    common = {"data_path": str(tmp_path / "corpus")}
    assert "`load` is not set" in problems(args(load=None, **common), "evaluate.py")
    assert "does not exist" in problems(args(load=str(tmp_path / "missing"), **common), "evaluate.py")
    # train-iters 0: train.py scores `load` as evaluate.py does
    assert "does not exist" in problems(args(load=str(tmp_path / "missing"), train_iters=0, **common))
    assert "`load` is not set" in problems(args(load=None, **common), "generate.py")
    untrained = problems(args(load=str(tmp_path / "ckpt"), save=str(tmp_path / "ckpt"), **common), "evaluate.py")
    assert untrained.endswith("It is this config's own `save` folder: train first, `python deepy.py train.py` "
                              "with the same configs.")


# ------------------------------------------------------------------------------------- deepy.py
def test_deepy_refuses_before_launching_and_dry_run_reports(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PreflightError, match="prepare_data.py github"):  # an unmarked test: a launch would fail it
        deepy.main([str(REPO_ROOT / "train.py"), str(KERPLE_LOG)])
    assert deepy.main([str(REPO_ROOT / "train.py"), str(KERPLE_LOG), "--dry-run"]) == 0
    inputs = capsys.readouterr().out.split("# Inputs\n", 1)[1]
    assert inputs.startswith("this run reads files that do not exist") and "prepare_data.py github" in inputs


def test_dry_run_lists_what_it_checked(tmp_path, capsys):
    write_pair(tmp_path / "corpus")
    assert deepy.main(["train.py", str(TINY), "--set", f"data-path={tmp_path}/corpus", "--dry-run"]) == 0
    assert capsys.readouterr().out.split("# Inputs\n", 1)[1].split("\n\n# Outputs")[0].strip() == \
        f"data-path {tmp_path}/corpus.bin and .idx (set by command line)"
