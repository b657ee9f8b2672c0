"""Issue 23's smaller first-contact items: no DeepSpeed accelerator warning on a machine without one,
`log-dir` keeps each process's output, probes time their lengths, `--set save-interval` beats a file's
checkpoint-factor, Megatron-LM spellings get the right did-you-mean, the paper's numbers are written like
ours, and a config mistake is printed by rank 0 only."""
import sys
import time
import types

import numpy as np
import pytest
import torch

from megatron.evaluation.context import ModeContext
from megatron.evaluation.modes import get_mode
from megatron.evaluation.run import scored_record
from megatron.neox_arguments import NeoXArgs, NeoXArgsError, run_cli
from megatron.neox_arguments import entry_points
from megatron.neox_arguments.log_files import log_file_names
from megatron.tokenizer import ByteLevelTokenizer
from tests.support.generation import VOCAB, tiny_model
from tests.support.training import REPO_ROOT, TINY
from tools.analysis.make_tables import _paper, fmt


# ------------------------------------------------------------------ DeepSpeed's accelerator warning
def test_the_cpu_accelerator_is_named_only_where_deepspeed_would_fall_back_to_it(monkeypatch):
    monkeypatch.setenv("DS_ACCELERATOR", "recorded")  # so that monkeypatch puts back what was there
    monkeypatch.delenv("DS_ACCELERATOR")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    entry_points.name_the_cpu_accelerator()
    assert entry_points.os.environ["DS_ACCELERATOR"] == "cpu"

    monkeypatch.delenv("DS_ACCELERATOR")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    entry_points.name_the_cpu_accelerator()
    assert "DS_ACCELERATOR" not in entry_points.os.environ  # a GPU: DeepSpeed chooses, as before

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    monkeypatch.setenv("DS_ACCELERATOR", "xpu")
    entry_points.name_the_cpu_accelerator()
    assert entry_points.os.environ["DS_ACCELERATOR"] == "xpu"  # the user's choice is kept


# ---------------------------------------------------------------------------------------- log-dir
def test_log_dir_copies_what_the_process_prints_and_appends(tmp_path, monkeypatch):
    for stream in ("stdout", "stderr"):
        monkeypatch.setattr(sys, stream, getattr(sys, stream))  # put back after the test
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(REPO_ROOT / "train.py"), raising=False)
    folder = tmp_path / "logs"
    for run in (1, 2):
        NeoXArgs.consume_args([str(TINY), "--set", f"log-dir={folder}"])
        print(f"run {run} out")
        print(f"run {run} err", file=sys.stderr)
        assert not sys.stderr.isatty()  # progress displays print plain lines, which read well in a file
        sys.stdout, sys.stderr = sys.stdout.stream, sys.stderr.stream
    out, err = log_file_names(str(folder), 0)
    assert open(out).read() == "run 1 out\nrun 2 out\n" and open(err).read() == "run 1 err\nrun 2 err\n"


def test_a_log_dir_that_cannot_be_made_is_one_paragraph(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(REPO_ROOT / "train.py"), raising=False)
    (tmp_path / "afile").write_text("x")
    with pytest.raises(NeoXArgsError, match=r"command line: log-dir: cannot write this process's log files in "
                                            r"'.*afile/logs' \(.*\)\. Give a folder this process can create"):
        NeoXArgs.consume_args([str(TINY), "--set", f"log-dir={tmp_path / 'afile' / 'logs'}"])


# --------------------------------------------------------------------------------- probes' timing
def test_a_probe_length_reports_the_time_it_took(capsys):
    model = tiny_model("rotary")

    def slow(tokens):
        time.sleep(0.05)
        return model(tokens)

    args = NeoXArgs.from_ymls([TINY], {"probe_depths": [0.0, 1.0], "probe_samples": 2, "probe_greedy": False})
    tokenizer = ByteLevelTokenizer()
    stream = np.array(tokenizer.tokenize("def f(x):\n    return x + 1\n" * 200))
    context = ModeContext(slow, stream, None, 64, args.evaluation_run().settings, VOCAB, network=model, tokenizer=tokenizer)
    with torch.inference_mode():
        record = scored_record(get_mode("kv-retrieval"), context, torch.device("cpu"), print)
    assert record["seconds"] >= 4 * 0.05  # four prompts, one forward each (batch size 1)
    line = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("L=64 kv-retrieval"))
    assert not line.endswith(" 0.0 s") and line.endswith(f"{record['seconds']:.1f} s")


# ------------------------------------------------------------------------- save-interval precedence
def test_set_save_interval_beats_the_files_checkpoint_factor(tmp_path):
    args = NeoXArgs.from_ymls([TINY], {"save_interval": 50})
    assert args.checkpoint_factor == 50 and args.config_sources["checkpoint_factor"] == "command line (as save_interval)"
    assert "replacing 100 of" in args.upstream_notice()
    args = NeoXArgs.from_ymls([TINY], {"checkpoint_factor": 7})
    assert args.checkpoint_factor == 7
    both = tmp_path / "both.yml"
    both.write_text("save-interval: 50\n")
    args = NeoXArgs.from_ymls([TINY, both], {"checkpoint_factor": 7})
    assert args.checkpoint_factor == 7  # the command line beats the file's save-interval too
    with pytest.raises(NeoXArgsError, match=r"both.yml:1: 'save-interval: 50' disagrees with checkpoint-factor 100 .*they are "
                                            r"the same key: save-interval is the KERPLE fork's name for "
                                            r"checkpoint-factor\. Keep one of them"):
        NeoXArgs.from_ymls([TINY, both])
    with pytest.raises(NeoXArgsError, match="disagrees with checkpoint-factor 7 \\(command line\\)"):
        NeoXArgs.from_ymls([TINY], {"save_interval": 50, "checkpoint_factor": 7})


# ----------------------------------------------------------------------------- Megatron spellings
@pytest.mark.parametrize("key, meant", [("micro-batch-size", "train-micro-batch-size-per-gpu"),
                                        ("global_batch_size", "train-batch-size"),
                                        ("ffn-hidden-size", "intermediate-size"),
                                        ("micro-batch-sise", "eval-micro-batch-size")])  # a typo: similarity
def test_megatron_spellings_suggest_the_key_they_mean(key, meant):
    with pytest.raises(NeoXArgsError, match=f"Did you mean '{meant}'\\?") as info:
        NeoXArgs.from_ymls([TINY], {key: 3})
    assert "\n" not in str(info.value)


def test_every_megatron_spelling_names_a_key_that_exists():
    from megatron.neox_arguments.values import MEGATRON_SPELLINGS
    assert set(MEGATRON_SPELLINGS.values()) <= set(NeoXArgs.user_keys())
    assert not set(MEGATRON_SPELLINGS) & set(NeoXArgs.user_keys())


# ------------------------------------------------------------------------------ the paper's column
@pytest.mark.parametrize("method, ratio, text", [("sinusoidal", 1, "4.00 ± 0.20"), ("kerple_log", 1, "3.40 ± 0.20"),
                                                 ("sinusoidal", 4, "1380 ± 404"), ("rotary", 32, "31.3 ± 5.2")])
def test_the_papers_numbers_are_written_as_ours_are(method, ratio, text):
    table = types.SimpleNamespace(paper_map={"stdlib": "GitHub"}, train_length={"stdlib": 64})
    assert _paper(table, "stdlib", method, 64 * ratio) == text
    mean, std = (float(n) for n in text.split(" ± "))
    assert text == f"{fmt(mean)} ± {fmt(std, mean)}"


# ------------------------------------------------------------------------------- rank 0 prints it
@pytest.mark.parametrize("rank, printed", [(None, True), ("0", True), ("1", False)])
def test_a_config_mistake_is_printed_by_rank_0_only(rank, printed, monkeypatch, capsys):
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")  # run_cli would otherwise set it in this process for good
    if rank is None:
        monkeypatch.delenv("RANK", raising=False)
    else:
        monkeypatch.setenv("RANK", rank)

    def main():
        raise NeoXArgsError("configs/tiny.yml:3: made-up-key: a mistake every rank sees.")

    with pytest.raises(SystemExit) as stopped:
        run_cli(main)
    assert stopped.value.code == 2
    assert capsys.readouterr().err == ("error: configs/tiny.yml:3: made-up-key: a mistake every rank sees.\n"
                                       if printed else "")
