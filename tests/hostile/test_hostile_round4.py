"""Hostile inputs, round 4: run names, result folders, RULER lengths, the GPU check's output, and what was
left over from round 3 (longrope factors, random-positions' tables, damaged model-states, a renamed step,
the Hugging Face export on a full disk, a long prefill, an imported fork's data keys). Config checks and
tools run in-process; the rows about an entry point's own behaviour launch it."""
import json

import numpy as np
import pytest

from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from tests.support.training import REPO_ROOT, TINY


def config_error(**overrides) -> str:
    """The one-paragraph NeoXArgsError the config check gives for configs/tiny.yml with `overrides`."""
    with pytest.raises(NeoXArgsError) as info:
        NeoXArgs.from_ymls([TINY], overrides)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ------------------------------------------------------- rows 2 and 3: what the tables print and read
def result_file(folder, losses, run_name=None, name="stdlib_kerple_log_seed1", config_hash="5bba9a12c0ffee"):
    """A result file of one run (kerple_log, seed 1, step 100) scored at length 64 over len(losses) chunks."""
    import numpy as np
    from megatron.evaluation.results import SCHEMA, summarize, write_atomic
    losses = np.asarray(losses, dtype=float)
    record = summarize(np.repeat(losses[:, None], 64, axis=1), 64, "nonoverlap", np.arange(len(losses)) * 64)
    run = {"name": name, "method": "kerple_log", "pos_emb": "kerple_log", "seed": 1, "dataset": "stdlib",
           "train_length": 64, "checkpoint_step": 100, "config_hash": config_hash}
    if run_name is not None:
        run.update(run_name=run_name, label=run_name)
    folder.mkdir(parents=True, exist_ok=True)
    write_atomic(folder / f"{name}.json", {"schema": SCHEMA, "results": [record], "run": run})
    return folder / f"{name}.json"


# ------------------------------------------------------------------ row 6: RULER result files checked
def ruler_file(folder, score):
    path = folder / "lm_eval" / "stdlib_kerple_log_seed1.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({
        "schema": "neox-lm-eval/1",
        "run": {"name": "stdlib_kerple_log_seed1", "method": "kerple_log", "pos_emb": "kerple_log", "seed": 1,
                "dataset": "stdlib", "train_length": 64, "checkpoint_step": 100},
        "ruler": {"niah_single_1": {"128": {"score": score, "ci95": [0.0, 1.0], "n": 2, "doc_ids": [0, 1],
                                            "scores": [0.0, 1.0]}}}}))
    return path


# ------------------------------------------------------------------- rows 2 and 5: a run's name
@pytest.mark.parametrize("name, fragments", [
    ("KERPLE\n| forged | 0.01 |", ["run-name: ", "holds '\\n', which is not printable text",
                                  "a run's name is one line of printable characters"]),
    ("x" * 1_000_000, ["run-name: ", "is 1000000 characters long", "it may hold at most 100"]),
    ("   ", ["run-name: is empty"]),
], ids=["newline and pipe", "1 MB", "blank"])
def test_a_run_name_is_one_line_of_printable_text_of_bounded_length(name, fragments):
    message = config_error(run_name=name)
    for fragment in fragments:
        assert fragment in message, message
    assert "command line" in message and len(message) < 1000


def test_a_human_run_name_is_kept():
    name = "KERPLE-log, ALiBi on windowed layers | ablation (ü)"
    assert NeoXArgs.from_ymls([TINY], {"run_name": name}).run_name == name


# ------------------------------------------------------------- row 7: longrope factors that underflow
@pytest.mark.parametrize("factor, fragments", [
    (1e-300, ["short-factor[0] = 1e-300", "into inf in float32", "overflows and makes the rotation NaN"]),
    (1e38, ["short-factor[0] = 1e+38", "in float32", "underflows and makes the rotation NaN"]),
])
def test_longrope_factors_whose_inverse_frequencies_leave_float32_are_refused_at_the_check(factor, fragments):
    """Checked where the methods are first built, at start-up (the memory check builds them on the meta
    device), so before any step is spent; before, a NaN forward blamed the weights or the dtype."""
    from megatron.run.preflight import memory_problem
    pairs = 8  # tiny.yml: head dim 64 / 4 = 16, all rotated
    args = NeoXArgs.from_ymls([TINY], {"pos_emb": "rotary", "rotary_scaling": {
        "type": "longrope", "factor": 4, "original-max-position": 64,
        "short-factor": [factor] + [1.0] * (pairs - 1), "long-factor": [1.0] * pairs}})
    with pytest.raises(NeoXArgsError) as info:
        memory_problem(args.preflight_run(), args.model, True, 257)
    message = str(info.value)
    for fragment in fragments + ["pos-emb 'rotary': rotary-scaling", "for pair 0, a factor between"]:
        assert fragment in message, message


# ----------------------------------------------------------- row 8: random-positions' distance table
def test_random_positions_whose_distance_table_cannot_fit_are_refused_with_the_largest_that_fits():
    import psutil
    from megatron.run.preflight import memory_problem
    args = NeoXArgs.from_ymls([TINY], {"pos_emb": "kerple_log", "random_positions": 10 ** 13})
    message = memory_problem(args.preflight_run(), args.model, True, 257)
    assert message.startswith("random-positions 10,000,000,000,000 (command line) cannot fit: "), message
    assert "pos-emb kerple_log builds a per-distance table" in message and "20 bytes a distance" in message
    largest = int(message.split("The largest random-positions that fits is ")[1].split(" ")[0].replace(",", ""))
    # 4 heads + the distances, float32: the largest span is what is free (less the model) over 20 bytes.
    assert args.seq_length <= largest < psutil.virtual_memory().total // 20
    small = NeoXArgs.from_ymls([TINY], {"pos_emb": "kerple_log", "random_positions": 10 ** 6})
    assert memory_problem(small.preflight_run(), small.model, True, 257) is None  # 20 MB
    # Rotary builds nothing per distance: round 3's 1e10 still trains.
    rotary = NeoXArgs.from_ymls([TINY], {"pos_emb": "rotary", "random_positions": 10 ** 13})
    assert memory_problem(rotary.preflight_run(), rotary.model, True, 257) is None


@pytest.mark.parametrize("fmt", ["md", "tex"])
def test_a_name_with_a_line_break_and_pipes_cannot_forge_a_table_row(fmt, tmp_path, capsys):
    """A result file written before names were checked (or by hand): the tables escape what they print."""
    from tools.analysis import make_tables
    result_file(tmp_path / "a", [2.0, 2.2], run_name="KERPLE\n| 9999 | 0.01 |")
    make_tables.main([str(tmp_path / "a"), "--format", fmt])
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    if fmt == "md":
        header = next(line for line in lines if line.startswith("| L | "))
        assert header == r"| L | KERPLE\\n\| 9999 \| 0.01 \| |", header
        assert not any(line.startswith("| 9999") for line in lines)
        rows = [line for line in lines if line.startswith("| 64")]
        assert len(rows) == 1 and rows[0].count(" | ") == 1  # two cells: the length and the one run's
    else:
        header = next(line for line in lines if line.startswith("L & "))
        assert header == r"L & KERPLE\textbackslash{}n| 9999 | 0.01 | \\", header
        assert not any(line.startswith("| 9999") for line in lines)


def test_two_folders_holding_one_run_with_different_numbers_are_refused_naming_both(tmp_path):
    from megatron.evaluation.results import ResultFileError
    from tools.analysis import make_tables
    first = result_file(tmp_path / "old", [2.0, 2.2])
    second = result_file(tmp_path / "new", [3.0, 3.2])
    with pytest.raises(ResultFileError) as info:
        make_tables.main([str(tmp_path / "old"), str(tmp_path / "new")])
    message = str(info.value)
    assert message.startswith(f"{first} and {second} are the same run ('kerple_log', dataset stdlib, seed 1, step "
                              "100, config hash 5bba9a12) but disagree at length 64, mode nonoverlap"), message
    assert "eval-chunks unset: loss 2.1 vs 3.1. One of them is stale" in message and "\n" not in message
    # The same numbers in both (a copied folder) are one run, shown once.
    result_file(tmp_path / "copy", [2.0, 2.2])
    make_tables.main([str(tmp_path / "old"), str(tmp_path / "copy")])


# ---------------------------------------------------------------- row 1: the GPU check's report folder
def test_a_smoke_run_never_writes_over_a_report_made_on_another_device(tmp_path, capsys):
    from tools.gpu_check import cli
    out = tmp_path / "gpu"
    out.mkdir()
    committed = (REPO_ROOT / "docs" / "gpu" / "report.json").read_bytes()  # made on an NVIDIA H200, profile 162M
    (out / "report.json").write_bytes(committed)
    assert cli.main(["--device", "cpu", "--tiny", "--out", str(out)]) == 2
    printed = capsys.readouterr().out.splitlines()
    assert len(printed) == 1 and printed[0].startswith(
        f"gpu-check: {out} holds a report made on NVIDIA H200 (profile 162M, "), printed
    assert "and this run is on cpu (profile tiny): it was not replaced" in printed[0] and "--force" in printed[0]
    assert (out / "report.json").read_bytes() == committed and sorted(p.name for p in out.iterdir()) == ["report.json"]


def test_without_out_each_run_gets_its_own_folder_outside_docs():
    from tools.gpu_check import cli
    folder = cli.report_folder(None, "NVIDIA H200", "162M")
    assert folder.parent == REPO_ROOT / "runs" / "gpu-check" and folder.name.startswith("nvidia-h200-162m-")
    assert cli.report_folder(None, "cpu", "tiny").name.startswith("cpu-tiny-")
    assert cli.replaced_report_problem(REPO_ROOT / "docs" / "gpu", "NVIDIA H200", "162M") is None  # a rerun there


def test_a_ruler_score_that_is_not_a_number_is_named_with_its_file_and_field(tmp_path, capsys):
    from megatron.evaluation.results import ResultFileError
    from tools.analysis import ruler_table
    path = ruler_file(tmp_path / "bad", "0.5")
    with pytest.raises(ResultFileError) as info:
        ruler_table.main([str(tmp_path / "bad")])
    assert str(info.value) == (f"{path} is not an lm-eval result file of schema neox-lm-eval/1: "
                               "ruler.niah_single_1.128.score is '0.5', not a finite number. eval.py writes these "
                               "files; re-run it to regenerate this one, or move it out of the folder.")
    ruler_file(tmp_path / "good", 0.5)  # the same file with a number is read
    ruler_table.main([str(tmp_path / "good")])
    assert "| 128 (2×) | 0.500 [0.00, 1.00] n=2 |" in capsys.readouterr().out


# ------------------------------------------------------------ rows 10 and 12: reading a checkpoint
def test_random_bytes_in_a_model_states_file_are_damaged_not_a_foreign_object(tmp_path):
    """A damaged copy, not a crafted file: torch's weights-only reader stops at an opcode, and that is not an
    object the file names (round 2's wording, which round 3's allow-list had turned into "can run code")."""
    from megatron.checkpoint.folder import CheckpointError
    from megatron.checkpoint.inference_model import open_checkpoint
    step = tmp_path / "ckpt" / "global_step2"
    step.mkdir(parents=True)
    (step / "mp_rank_00_model_states.pt").write_bytes(np.random.default_rng(0).bytes(65536))
    (tmp_path / "ckpt" / "latest").write_text("global_step2")
    with pytest.raises(CheckpointError) as info:
        open_checkpoint(tmp_path / "ckpt")
    message = str(info.value)
    assert message.startswith(f"cannot read {step / 'mp_rank_00_model_states.pt'}: its bytes are not a checkpoint "
                              "torch can read, so it is damaged or not a checkpoint (torch's reader stopped at "
                              "'Unsupported operand "), message
    assert message.endswith("The checkpoint is damaged; load another step with `iteration`.")
    assert "run code" not in message and "\n" not in message


# --------------------------------------------------------------------- row 11: a long prefill's progress
def test_a_long_prefill_says_what_it_does_and_shows_its_progress(monkeypatch, capsys):
    import torch
    from megatron.text_generation import generate_tokens, steps
    from tests.support.generation import tiny_model
    monkeypatch.setattr(steps, "LONG_PREFILL", 600)  # the threshold (16,384 tokens) and interval (10 s), shrunk
    monkeypatch.setattr(steps, "PREFILL_INTERVAL", 0.0)
    model = tiny_model(max_position_embeddings=1024, attention_block_size=64)
    prompt = torch.randint(0, 258, (600,), generator=torch.Generator().manual_seed(0)).tolist()
    generate_tokens(model, [prompt], max_new_tokens=1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == ("prefill: 600 prompt tokens x 1 row(s) in 10 blocks of 64 queries (attention-block-size) "
                        "before the first new token; progress below"), lines
    assert lines[1].startswith("prefill: 1/10 block (10%), ") and "64 tokens" in lines[1] and "ETA" in lines[1]
    assert lines[-1].startswith("prefill: done, 10/10 block (100%), ") and "600 tokens" in lines[-1]
    generate_tokens(model, [prompt[:500]], max_new_tokens=1)  # a short prompt says nothing
    assert capsys.readouterr().err == ""


# -------------------------------------------------- row 13: an imported fork's config that names no data
def test_the_evaluate_command_printed_after_an_import_names_the_data_key_to_add(tmp_path, capsys):
    from tests.support.neox_fork import fork_checkpoint
    from tools.ckpts import import_neox
    fork_checkpoint(tmp_path, "alibi")  # its saved config names the model, not the data (as a fork's may)
    import_neox.main([str(tmp_path / "fork"), str(tmp_path / "ours")])
    printed = capsys.readouterr().out.splitlines()
    command = next(line for line in printed if line.startswith("evaluate: "))
    assert command.endswith(f"configs/eval/extrapolation.yml --set load={tmp_path / 'ours'} --set data-path=PREFIX")
    assert any(line.startswith("note: the run's config names no data (data-path, or test-data-paths") and
               "replace PREFIX with the .bin/.idx prefix" in line for line in printed), printed
