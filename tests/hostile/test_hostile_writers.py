"""Writers of results and checkpoints never lose what a user had, in-process: tools/ckpts/import_neox.py never
re-points another run's `latest`; generate.py never overwrites a sample file and refuses bad settings before
loading; a failed export leaves no folder behind. eval.py merging a second task into its result file, and each
check once through its entry point: tests/e2e/hostile/test_hostile_writers.py."""
import os
import pathlib
import stat
import sys

import numpy as np
import pytest
import torch
from lm_eval.api.instance import Instance

from tests.support import neox_fork as fork
from megatron.checkpoint.checkpointing import CheckpointError
from megatron.evaluation.lm_eval_adapter import NeoXLM
from megatron.evaluation.run import EvaluationError
from megatron.evaluation.results import _umask as current_umask
from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.output_paths import new_file_problem, new_folder_problem
from megatron.neox_arguments import NeoXArgs
from megatron.text_generation import GenerationError, generate_tokens
from megatron.text_generation.run import write_new_file
from megatron.text_generation.sampling import setting_problems
from megatron.tokenizer import build_tokenizer
from tests.support.hf_export import tiny_source
from tests.support.generation import generate_run_of
from tests.support.hostile import FORK, GENERATION, generation_args
from tests.support.training import REPO_ROOT, TINY, set_flags, tiny_args, tiny_overrides
from tools.ckpts.hf_export import ExportError, export_checkpoint, export_model
from tools.ckpts.neox_import import CheckpointImportError, import_checkpoint


# -------------------------------------------------------- rows 2 and 12: tools/ckpts/import_neox.py
def test_import_into_another_runs_save_folder_is_refused_and_its_latest_kept(tmp_path):
    fork.write_fork_checkpoint(tmp_path / "fork", fork.make_weights("alibi", FORK), FORK, "alibi")
    save = tmp_path / "ckpt"  # a save folder of this project's layout, made by one import
    import_checkpoint(tmp_path / "fork", save)
    (save / "global_step7").rename(save / "global_step3")  # as if its run had saved step 3
    (save / "latest").write_text("global_step3")
    with pytest.raises(CheckpointImportError, match=rf"OUT {save} holds a run's checkpoints \(steps \[3\], `latest` "
                       r"names 'global_step3'\)\. The import writes its own `latest` there.*give another OUT "
                       r"\(e\.g\. ckpt-imported\)"):
        import_checkpoint(tmp_path / "fork", save)
    assert (save / "latest").read_text() == "global_step3" and sorted(os.listdir(save)) == ["global_step3", "latest"]
    # Any folder holding something is refused (a crashed import's partial folder too); a file, or a path
    # under one, is named as such; none of it creates anything.
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(CheckpointImportError, match=r"other is not empty \(it holds \['notes.txt'\]\)"):
        import_checkpoint(tmp_path / "fork", other)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(CheckpointImportError, match=r"OUT .*afile is a file, not a folder"):
        import_checkpoint(tmp_path / "fork", tmp_path / "afile")
    with pytest.raises(CheckpointImportError, match=r"OUT .*afile/out is under .*afile, which is a file"):
        import_checkpoint(tmp_path / "fork", tmp_path / "afile" / "out")
    # An empty folder (or a new one) is what it writes into.
    (tmp_path / "empty").mkdir()
    folder, _ = import_checkpoint(tmp_path / "fork", tmp_path / "empty")
    assert folder == tmp_path / "empty" / "global_step7"
    assert (tmp_path / "empty" / "latest").read_text() == "global_step7"


def test_pos_emb_that_disagrees_with_the_saved_config_is_refused_naming_both(tmp_path):
    fork.write_fork_checkpoint(tmp_path / "fork", fork.make_weights("kerple_log", FORK), FORK, "kerple_log")
    saved = tmp_path / "fork" / "global_step7" / "configs" / "run.yml"
    with pytest.raises(CheckpointImportError, match=rf"--pos-emb kerple_power disagrees with the run's config: "
                       rf"{saved}:\d+ says pos-emb kerple_log\..*Leave out --pos-emb"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours", pos_emb="kerple_power")
    with pytest.raises(CheckpointImportError, match=r"--set pos-emb=alibi disagrees with the run's config"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours", overrides={"pos-emb": "alibi"})
    # The rule is any key that defines the model, not only the method: --set may fill in, not contradict.
    with pytest.raises(CheckpointImportError, match=rf"--set norm=rmsnorm disagrees with the run's config: "
                       rf"{saved}:\d+ says norm layernorm\. Importing with norm rmsnorm would build another model"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours", overrides={"norm": "rmsnorm"})
    assert not (tmp_path / "ours").exists()
    # The same method in another spelling (the fork's kerple_power_ap_) is no disagreement.
    fork.write_fork_checkpoint(tmp_path / "power", fork.make_weights("kerple_power", FORK), FORK, "kerple_power")
    assert "kerple_power_ap_" in (tmp_path / "power" / "global_step7" / "configs" / "run.yml").read_text()
    folder, _ = import_checkpoint(tmp_path / "power", tmp_path / "ours", pos_emb="kerple_power")
    assert folder.name == "global_step7"


# ------------------------------------------------------------- rows 3, 17-20: generate.py up front
def test_an_existing_sample_output_file_is_refused_before_loading_and_kept(tmp_path):
    kept = tmp_path / "samples.jsonl"
    kept.write_text("earlier samples\n")
    with pytest.raises(GenerationError, match=rf"^command line: sample-output-file: {kept} exists already, and it "
                       r"is never overwritten: give a new file name, or move the file away first"):
        generate_run_of(generation_args(tmp_path, sample_output_file=str(kept)))
    assert kept.read_text() == "earlier samples\n"


def test_force_replaces_the_sample_output_file_whole_and_only_then(tmp_path, monkeypatch):
    """generate.py --force: the existing file passes the check (the checkpoint is what is missing here), and
    is replaced by a rename of the complete new file; without --force the refusal says how to replace it."""
    kept = tmp_path / "samples.jsonl"
    kept.write_text("earlier samples\n")
    with pytest.raises(GenerationError, match=r"replaces it only when given --force: sample-output-force: true"):
        generate_run_of(generation_args(tmp_path, sample_output_file=str(kept)))
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(REPO_ROOT / "generate.py"), raising=False)
    forced = NeoXArgs.consume_args([str(TINY), str(GENERATION), "--force", *set_flags(
        tiny_overrides("unused-data", tmp_path, load=str(tmp_path / "no-checkpoint"), sample_output_file=str(kept)))])
    assert forced.sample_output_force and forced.config_sources["sample_output_force"] == "command line"
    with pytest.raises(Exception, match="no-checkpoint") as refused:
        generate_run_of(forced)
    assert "sample-output-file" not in str(refused.value)
    assert write_new_file(kept, "new samples\n", replace=True) == kept and kept.read_text() == "new samples\n"
    assert os.listdir(tmp_path).count("samples.jsonl") == 1 and not list(tmp_path.glob(".samples-*"))


@pytest.mark.parametrize("name, fragment", [
    ("folder", r"out is a folder; give the path of a file to write \(e\.g\. .*out/samples\.jsonl\)"),
    ("under_file", r"afile/samples\.jsonl is under .*afile, which is a file, not a folder"),
    ("long_name", r"cannot be created: the name 'xxxx.* is 306 bytes long, more than the 255 the filesystem allows "
                  r"for one file or folder name \(NAME_MAX\)\. Choose a shorter name"),
])
def test_an_output_path_that_cannot_take_a_file_is_found_before_loading(name, fragment, tmp_path):
    (tmp_path / "out").mkdir()
    (tmp_path / "afile").write_text("mine")
    path = {"folder": tmp_path / "out", "under_file": tmp_path / "afile" / "samples.jsonl",
            "long_name": tmp_path / "new" / ("x" * 300 + ".jsonl")}[name]
    args = generation_args(tmp_path)
    args.sample_output_file = str(path)  # (the config loader refuses some of these itself now; this is the run's check)
    with pytest.raises(GenerationError, match=r"^the config: sample-output-file: .*" + fragment):
        generate_run_of(args)
    assert not (tmp_path / "new").exists() and (tmp_path / "afile").read_text() == "mine"


def test_output_path_checks_take_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert new_file_problem("samples.jsonl") is None and new_file_problem("sub/dir/samples.jsonl") is None
    assert new_folder_problem("hf") is None and not os.listdir(tmp_path)  # nothing created
    assert "is 306 bytes long, more than the 255" in new_file_problem("sub/" + "x" * 300 + ".jsonl")
    pathlib.Path("afile").write_text("x")
    assert new_folder_problem("afile") == "afile is a file, not a folder: give a new folder."
    assert new_file_problem("afile/s.jsonl").startswith("afile/s.jsonl is under afile, which is a file")


def test_samples_are_written_atomically_and_a_file_that_appeared_meanwhile_is_kept(tmp_path):
    path = tmp_path / "deep" / "samples.jsonl"
    assert write_new_file(path, "one\n") == path and path.read_text() == "one\n"
    assert write_new_file(path, "two\n") == tmp_path / "deep" / "samples-2.jsonl"  # appeared since the check
    assert path.read_text() == "one\n" and (tmp_path / "deep" / "samples-2.jsonl").read_text() == "two\n"
    assert sorted(p.name for p in path.parent.iterdir()) == ["samples-2.jsonl", "samples.jsonl"]  # no temporary
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~current_umask()


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_temperature_that_is_not_finite_is_refused(value, tmp_path):
    assert setting_problems(8, value, 0, 0.0) == [
        ("temperature", f"must be a finite number >= 0 (0 is greedy), got {value}.")]
    args = generation_args(tmp_path)
    args.temperature = value  # what a config cannot give any more (the loader refuses .nan), a caller can
    with pytest.raises(GenerationError, match=rf"temperature: must be a finite number >= 0 \(0 is greedy\), "
                                              rf"got {value}"):
        generate_run_of(args)
    model = GPTModel(model_config(args, 258)).eval()
    with pytest.raises(GenerationError, match=r"bad generation settings: temperature must be a finite number"):
        generate_tokens(model, [[1, 2]], max_new_tokens=4, temperature=value)


def test_a_prompt_file_that_is_not_utf8_and_an_empty_prompt_end_are_clear_errors(tmp_path):
    prompts = tmp_path / "prompts.txt"
    prompts.write_bytes("def main(\n".encode() + "café\n".encode("latin-1"))
    with pytest.raises(GenerationError, match=rf"sample-input-file {prompts} is not UTF-8 text: byte 0xe9 at offset "
                       r"13 \(line 2\) does not decode\. Save the prompts as UTF-8"):
        generate_run_of(generation_args(tmp_path, text_gen_type="input-file", sample_input_file=str(prompts)))
    prompts.write_text("def main(\n")
    for kind in ("input-file", "interactive"):
        with pytest.raises(GenerationError, match=r"command line: prompt-end: is empty, so prompts cannot be told "
                                                  r"apart"):
            generate_run_of(generation_args(tmp_path, text_gen_type=kind, sample_input_file=str(prompts), prompt_end=""))


def test_a_kv_cache_that_cannot_fit_is_refused_with_its_size_before_loading(tmp_path):
    with pytest.raises(GenerationError, match=r"^command line: maximum-tokens 1,000,000,000 cannot fit: generating "
                       r"it needs at least [\d,.]+ GiB for the KV cache \(keys and values of 2 layers x 2 prompt\(s\) "
                       r"x 1,000,000,001 tokens x 64 hidden x 4 bytes\) on top of .* GiB of weights, but there are "
                       r"[\d,.]+ GiB of available memory\. Set maximum-tokens to at most [\d,]+ "):
        generate_run_of(generation_args(tmp_path, maximum_tokens=1_000_000_000))
    with pytest.raises(GenerationError, match=r"forward of 1 sequence\(s\) of 1,000,000,001 tokens \(recompute"):
        generate_run_of(generation_args(tmp_path, maximum_tokens=1_000_000_000, recompute=True, num_samples=1))
    # What fits is not refused (the checkpoint is then looked for), and the library call checks it too.
    with pytest.raises(CheckpointError):
        generate_run_of(generation_args(tmp_path, maximum_tokens=100_000))
    model = GPTModel(model_config(generation_args(tmp_path), 258)).eval()
    with pytest.raises(GenerationError, match=r"maximum-tokens 1,000,000,000 cannot fit: .* KV cache \(keys and "
                       r"values of 2 layers x 1 prompt\(s\) x 1,000,000,002 tokens"):
        generate_tokens(model, [[1, 2]], max_new_tokens=1_000_000_000)


def adapter(tmp_path, max_length, stride=None):
    args = tiny_args("unused-data", tmp_path)
    torch.manual_seed(0)
    return NeoXLM(GPTModel(model_config(args, 258)).eval(), build_tokenizer(args.tokenizer_run()), max_length=max_length, stride=stride)


# ------------------------------------------------------ rows 22 and 5: eval.py's limit and lengths
def test_a_short_document_is_one_window_of_its_own_length_at_any_eval_task_length(tmp_path):
    tokens = list(range(60, 120))  # a 60-token document
    reference = adapter(tmp_path, 64).rolling_token_losses(tokens)  # padded to one window of 64 before
    huge = adapter(tmp_path, 1_000_000_000, stride=16)
    np.testing.assert_allclose(huge.rolling_token_losses(tokens), reference, rtol=0, atol=1e-6)
    np.testing.assert_allclose(adapter(tmp_path, 60, stride=8).rolling_token_losses(tokens), reference, atol=1e-6)
    # Longer than max_length: still windows of max_length (the sliding pass), the same as before.
    long = adapter(tmp_path, 32, stride=8).rolling_token_losses(tokens * 3)
    assert long.shape == (180,) and np.isfinite(long).all()


def test_a_window_the_device_cannot_hold_is_refused_with_its_size_before_scoring(tmp_path, monkeypatch):
    import megatron.evaluation.lm_eval_adapter as module
    monkeypatch.setattr(module, "available_bytes", lambda: (2 ** 20, "of available memory"))  # 1 MiB
    lm = adapter(tmp_path, 1_000_000_000)
    scored = []
    monkeypatch.setattr(lm, "rolling_token_losses", lambda tokens: scored.append(tokens))
    text = "x" * 2000  # 2000 byte-level tokens: 2000 x 4 x (64 + 258) bytes = 2.46 MiB of window
    with pytest.raises(EvaluationError, match=r"eval-task-length 1,000,000,000: lm-eval's longest "
                       r"loglikelihood_rolling document is scored in a window of 2,000 tokens, which needs at least "
                       r"0\.00 GiB .* there are 0\.00 GiB of available memory\. Set eval-task-length to at most 814 "):
        lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, ("short",), 0),
                                  Instance("loglikelihood_rolling", {}, (text,), 1)])
    assert scored == []  # not even the short one was scored first
    with pytest.raises(EvaluationError, match=r"longest loglikelihood request \(context and continuation\) is scored "
                       r"in a window of 2,000 tokens"):
        lm._loglikelihood_tokens([(None, list(range(1000)), list(range(1001)))])
    with pytest.raises(EvaluationError, match=r"lm-eval's generate_until requests: max-gen-toks 1,000,000,000 cannot "
                       r"fit: .* KV cache"):
        lm.generate_until([Instance("generate_until", {}, ("def", {"max_gen_toks": 1_000_000_000}), 0)])


# ----------------------------------------------------------- row 21: tools/ckpts/convert_to_hf.py
def test_an_output_dir_that_is_a_file_or_under_one_is_refused_before_loading(tmp_path):
    (tmp_path / "afile").write_text("mine")
    missing = tmp_path / "no-checkpoint" / "global_step5"  # loading it would be an error of its own
    with pytest.raises(ExportError, match=r"^--output_dir .*afile is a file, not a folder: give a new folder"):
        export_checkpoint(missing, tmp_path / "afile")
    with pytest.raises(ExportError, match=r"^--output_dir .*afile/hf is under .*afile, which is a file"):
        export_checkpoint(missing, tmp_path / "afile" / "hf")
    assert (tmp_path / "afile").read_text() == "mine"


def test_a_failed_export_leaves_no_folder_behind(tmp_path, monkeypatch):
    import tools.ckpts.hf_export.export as export

    def fail(*args):
        raise OSError(28, "No space left on device")
    monkeypatch.setattr(export, "export_tokenizer", fail)
    with pytest.raises(OSError, match="No space left"):
        export_model(tiny_source("alibi"), tmp_path / "hf")
    assert os.listdir(tmp_path) == []  # neither the folder nor its hidden partial one
    monkeypatch.undo()
    export_model(tiny_source("alibi"), tmp_path / "hf")
    assert (tmp_path / "hf" / "config.json").is_file() and os.listdir(tmp_path) == ["hf"]
    assert stat.S_IMODE((tmp_path / "hf").stat().st_mode) == 0o777 & ~current_umask()
