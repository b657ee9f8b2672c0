"""Hostile inputs, round 4: run names, result folders, RULER lengths, the GPU check's output, and what was
left over from round 3 (longrope factors, random-positions' tables, damaged model-states, a renamed step,
the Hugging Face export on a full disk, a long prefill, an imported fork's data keys). Config checks and
tools run in-process; the rows about an entry point's own behaviour launch it."""
import os
import shutil

import pytest

from tests.support.training import REPO_ROOT

TINY = REPO_ROOT / "configs" / "tiny.yml"


@pytest.fixture(scope="module")
def trained(trained_tiny):
    """The tiny profile trained 4 steps by train.py once per test run (kerple_log, 64 tokens; tests/e2e/conftest.py),
    only read here: save/global_step4."""
    return trained_tiny


# the checkpoint is trained by train.py
def test_a_renamed_step_folder_says_the_one_way_that_loads_it_and_that_way_works(trained, tmp_path):
    from megatron.checkpoint.folder import CheckpointError
    from megatron.checkpoint.inference_model import load
    ckpt = tmp_path / "ckpt"
    shutil.copytree(trained, ckpt)
    (ckpt / "global_step4").rename(ckpt / "global_step7")
    (ckpt / "latest").write_text("global_step7")
    with pytest.raises(CheckpointError) as info:
        load(ckpt)
    assert str(info.value) == (
        f"{ckpt / 'global_step7'} is the folder of step 7, but its model-states file says iteration 4: the folder was "
        f"renamed or the file copied from another step. To load it, rename the folder back to {ckpt / 'global_step4'} "
        "(and, if `latest` names it, write global_step4 into `latest`); or use a checkpoint train.py wrote.")
    (ckpt / "global_step7").rename(ckpt / "global_step4")  # what it says
    (ckpt / "latest").write_text("global_step4")
    assert load(ckpt).step == 4


# ------------------------------------------------------------------- row 4: RULER lengths that cannot fit
def test_a_ruler_length_nothing_could_score_is_refused_before_lm_eval_builds_it(trained, tmp_path, monkeypatch,
                                                                                 capsys):
    # eval.py's own main in this process (entry_point_in_process); its launches: test_hostile_writers.py.
    from tests.support.hostile import assert_clear_error, entry_point_in_process
    result = entry_point_in_process(monkeypatch, capsys, "eval.py", trained / "global_step4" / "resolved_config.yml",
                                    "--set", f"load={trained}", "--set", f"eval-results-dir={tmp_path / 'results'}",
                                    "--eval_tasks", "niah_single_1",
                                    "--set", "eval-task-metadata={max_seq_lengths: [100000000]}")
    message = assert_clear_error(result, "command line: eval-task-metadata max_seq_lengths [100000000] cannot be "
                                         "scored here, at the longest: this model cannot fit: it needs at least ",
                                 "activations of 1 sequence(s) of 100,000,000 tokens",
                                 "The longest RULER length that fits is ", "Nothing was built or scored.")
    longest = int(message.split("The longest RULER length that fits is ")[1].split(" ")[0].replace(",", ""))
    assert 64 < longest < 100_000_000
    assert not (tmp_path / "results" / "lm_eval").exists() or not list((tmp_path / "results").rglob("*.json"))


# --------------------------------------------------------- row 9: the Hugging Face export on a full disk
from tests.support.hostile import full_disk  # noqa: E402,F401 (a fixture: a 3 MB tmpfs, root only)


# the checkpoint is trained by train.py
def test_convert_to_hf_on_a_full_disk_is_one_paragraph_and_leaves_nothing(trained, full_disk, capsys):
    """200 KB left: the export's code and config files fit, its weights (about 0.5 MB) do not, so the write that
    fails is safetensors' (a SafetensorError, not an OSError, which was a traceback)."""
    from megatron.output_paths import WriteFailed
    from tools.ckpts import convert_to_hf
    space = os.statvfs(full_disk)
    with open(full_disk / "filler", "wb") as filler:
        filler.write(b"\0" * (space.f_bavail * space.f_frsize - 200_000))
    with pytest.raises(WriteFailed) as info:
        convert_to_hf.main(["--input_dir", str(trained / "global_step4"), "--output_dir", str(full_disk / "hf")])
    assert str(info.value) == (f"the Hugging Face export could not be written to {full_disk / 'hf'}: 'no space left "
                               "on the device'. Free space there (or set --output_dir to a folder on another disk) "
                               "and run again.")
    assert sorted(os.listdir(full_disk)) == ["filler"]  # no hidden partial folder, no half-written export


