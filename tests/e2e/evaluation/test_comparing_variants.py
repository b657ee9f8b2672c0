"""Comparing variants like a paper (docs/comparing-variants.md), through the entry points: runs named or
labelled by what they were trained with (read from the checkpoint, never from the evaluating config),
evaluation that resumes, tables and figures over several folders with filters, renames and budgets."""
import contextlib
import csv
import io
import json

import numpy as np
import pytest
from scipy import stats
from tests.support.hostile import assert_clear_error
from tests.support.training import TINY, run_script, set_flags, tiny_overrides

from megatron.evaluation.labels import readable_label, trained_parts
from megatron.evaluation.retrieval.heatmap import quantity_grid
from megatron.evaluation.results import ResultFileError, load_result
from tools.analysis import make_tables, plot_lengths, plot_probe
from tools.analysis.plot_lengths import BOOTSTRAP_SAMPLES, chunk_bootstrap, plot_perplexity_vs_length
from tools.analysis.result_selection import read_paths


STEPS = {"docpos": 4, "plain": 4, "alibi": 2}  # ALiBi trained for another budget
BATCH, SEQ = 16, 64  # configs/tiny.yml: train_micro_batch_size_per_gpu and seq-length, one rank
TRAINED = {  # what each run is trained with beyond configs/tiny.yml
    "docpos": {"reset_attention_mask": True, "reset_position_ids": True, "eval_lengths": "[64, 128]"},
    "plain": {"eval_lengths": "[64, 128]"},
    "alibi": {"pos_emb": "alibi", "run_name": "ALiBi short", "eval_lengths": "[64, 128]"},
}


@pytest.fixture(scope="module")
def runs(stdlib_data, tmp_path_factory):
    """Three tiny runs trained side by side, each with its own results folder (its eval-results-dir)."""
    import subprocess
    import sys

    from tests.support.training import REPO_ROOT, child_environment
    root = tmp_path_factory.mktemp("variants")
    processes = {}
    for name, extra in TRAINED.items():
        values = tiny_overrides(stdlib_data, root / name, train_iters=STEPS[name], checkpoint_factor=STEPS[name],
                                eval_results_dir=str(root / name / "results"), eval_iters=0, **extra)
        if name == "plain":  # its evaluation goes to its TensorBoard too
            values["tensorboard_dir"] = str(root / name / "tensorboard")
        processes[name] = subprocess.Popen([sys.executable, "train.py", str(TINY), *set_flags(values)], cwd=REPO_ROOT,
                                           env=child_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                           text=True)
    for name, process in processes.items():
        output = process.communicate(timeout=600)[0]
        assert process.returncode == 0, f"training {name} failed:\n{output[-3000:]}"
    return root


def evaluate_alone(checkpoint, *flags, env=None, **overrides):
    """evaluate.py given the checkpoint and nothing else about the run."""
    import subprocess
    import sys

    from tests.support.training import REPO_ROOT, child_environment
    argv = ["evaluate.py", "--set", f"load={checkpoint}", *set_flags({"eval_chunks": 3, **overrides}), *flags]
    return subprocess.run([sys.executable, *argv], cwd=REPO_ROOT, env={**child_environment(), **(env or {})},
                          capture_output=True, text=True, timeout=600)


def evaluate_here(checkpoint, **overrides):
    """What evaluate.py runs, given the same keys, in this process (a process start is most of a tiny evaluation):
    the config package's NeoXArgs and the evaluation driver's evaluate_run. For the behaviours after the entry point
    has started (what the result file holds, refusals of the driver); evaluate.py itself is launched by the
    `evaluated` fixture on the other two runs and for a refusal beside it."""
    import torch

    from megatron.evaluation.driver import evaluate_run
    from megatron.neox_arguments import NeoXArgs
    torch.set_num_threads(1)  # as the launched entry point takes (OMP_NUM_THREADS=1)
    return evaluate_run(NeoXArgs.from_ymls([], {"load": str(checkpoint), "eval_chunks": 3, **overrides})
                        .evaluation_run())


@pytest.fixture(scope="module")
def evaluated(runs):
    """Each run evaluated from its checkpoint alone, once, by evaluate.py (docpos by its code in this process); the
    ALiBi run into a second folder; the plain run's evaluation also to W&B (offline, into its log-dir), besides its
    TensorBoard."""
    evaluate_here(runs / "docpos" / "ckpt")  # what evaluate.py runs, without a process of its own
    result = evaluate_alone(runs / "plain" / "ckpt", use_wandb=True, wandb_project="tests", log_dir=runs / "logs",
                            env={"WANDB_MODE": "offline", "WANDB_SILENT": "true"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert " and W&B project tests" in result.stdout, result.stdout[-3000:]
    result = evaluate_alone(runs / "alibi" / "ckpt", eval_results_dir=str(runs / "second"))
    assert result.returncode == 0, result.stderr[-3000:]
    return runs


def only_file(folder):
    (path,) = folder.glob("*.json")
    return path


def test_a_checkpoint_alone_is_labelled_by_what_it_was_trained_with(evaluated):
    document = load_result(only_file(evaluated / "docpos" / "results"))  # the run's own results folder
    run = document["run"]
    assert (run["method"], run["label"], run["run_name"]) == ("kerple_log+docpos", "kerple_log + docpos", None)
    assert sorted({r["length"] for r in document["results"]}) == [64, 128]  # the run's own eval-lengths
    steps = STEPS["docpos"]
    assert (run["train_steps"], run["train_tokens"]) == (steps, steps * BATCH * SEQ)
    plain = load_result(only_file(evaluated / "plain" / "results"))["run"]
    assert (plain["method"], plain["label"]) == ("kerple_log", "kerple_log")
    assert plain["config_hash"] != run["config_hash"]


def test_evaluation_goes_to_the_runs_tensorboard_as_perplexity_against_length(evaluated):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    events = EventAccumulator(str(evaluated / "plain" / "tensorboard"))
    events.Reload()
    points = sorted((e.step, e.value) for e in events.Scalars("eval/nonoverlap/ppl"))
    records = sorted((r["length"], r["ppl"]) for r in load_result(only_file(evaluated / "plain" / "results"))["results"])
    assert [step for step, _ in points] == [length for length, _ in records] == [64, 128]
    np.testing.assert_allclose([v for _, v in points], [ppl for _, ppl in records], rtol=1e-6)  # float32 events


def test_evaluation_goes_to_wandb_as_perplexity_against_length(evaluated):
    import glob

    from tests.support.wandb import wandb_history
    (run_file,) = glob.glob(str(evaluated / "logs" / "wandb" / "offline-run-*" / "run-*.wandb"))
    rows = [row for row in wandb_history(run_file) if "eval/nonoverlap/ppl" in row]
    records = load_result(only_file(evaluated / "plain" / "results"))["results"]
    assert [row["eval/length"] for row in rows] == [r["length"] for r in records] == [64, 128]
    assert [row["eval/nonoverlap/ppl"] for row in rows] == pytest.approx([r["ppl"] for r in records], rel=1e-12)


def test_a_named_run_keeps_its_name_and_refuses_another(evaluated, capsys):
    run = load_result(only_file(evaluated / "second"))["run"]
    assert (run["run_name"], run["label"], run["readable_label"]) == ("ALiBi short", "ALiBi short", "alibi")
    result = evaluate_alone(evaluated / "alibi" / "ckpt", eval_results_dir=str(evaluated / "second"),
                            run_name="Other")
    assert_clear_error(result, "run-name 'Other' (command line) differs from the name 'ALiBi short' the checkpoint",
                       "--rename OLD=NEW")
    # An unnamed run given the name at evaluation, into the folder where another run has it: refused (by the same
    # driver, in this process: the launch above shows how evaluate.py prints the driver's refusals).
    from megatron.run.preflight import PreflightError
    with pytest.raises(PreflightError) as taken:
        evaluate_here(evaluated / "plain" / "ckpt", eval_results_dir=str(evaluated / "second"), run_name="ALiBi short")
    assert str(taken.value).startswith(f"run-name 'ALiBi short' already names another run in {evaluated / 'second'}: ")
    assert "train this run under another run-name" in str(taken.value)
    assert "L=64" not in capsys.readouterr().out and len(list((evaluated / "second").glob("*.json"))) == 1


def test_labels_spell_out_patterns_wrappers_and_scalings():
    trained = {"layer_pattern": [{"pos-emb": "alibi", "attention-window": 32}, {"pos-emb": "kerple_log"}],
               "dape": {"version": 2, "hidden": 32}, "attention_temperature": {"type": "ssmax"},
               "random_positions": 256, "reset_attention_mask": True}
    assert readable_label("kerple_log", trained_parts(trained), []) == (
        "kerple_log + layers[alibi/w32, kerple_log] + ssmax + dape2(hidden=32) + random positions <256 + docmask")
    assert readable_label("rotary", [], ["yarn ×8"], "RoPE") == "RoPE + yarn ×8"


def test_evaluating_again_skips_what_the_file_holds(evaluated, capsys):
    """evaluate.py's driver run again on the docpos run's checkpoint, in this process: what the file holds is
    skipped, new settings are a new entry, --force scores again."""
    folder = evaluated / "docpos" / "results"
    path = only_file(folder)
    before = path.read_bytes()
    capsys.readouterr()
    evaluate_here(evaluated / "docpos" / "ckpt")
    again = capsys.readouterr().out
    skipped = [line for line in again.splitlines() if "already in" in line]
    assert [line.split(":")[0] for line in skipped] == ["L=64", "L=128"]  # one line per length
    assert "nothing new to score" in again and path.read_bytes() == before

    evaluate_here(evaluated / "docpos" / "ckpt", eval_chunks=4)  # a new entry, not a refusal
    records = load_result(path)["results"]
    assert sorted((r["length"], r["eval_chunks"], r["chunks"]) for r in records) == [
        (64, 3, 3), (64, 4, 4), (128, 3, 3), (128, 4, 4)]

    capsys.readouterr()
    evaluate_here(evaluated / "docpos" / "ckpt", eval_force=True)  # evaluate.py's --force
    assert "L=64 nonoverlap: loss" in capsys.readouterr().out
    rescored = {(r["length"], r["eval_chunks"]): r["loss"] for r in load_result(path)["results"]}
    assert rescored == {(r["length"], r["eval_chunks"]): r["loss"] for r in records}  # same chunks, same model


def table(*argv):
    """make_tables' printed output (its entry point, in this process: quicker than a child)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        make_tables.main(list(argv))
    return out.getvalue()


def test_one_table_over_two_folders_shows_names_budgets_and_refuses_tests_across_budgets(evaluated):
    folders = [str(evaluated / "docpos" / "results"), str(evaluated / "plain" / "results"), str(evaluated / "second")]
    text = table(*folders, "--reference", "kerple_log + docpos")
    header = next(line for line in text.splitlines() if line.startswith("| L |"))
    assert header == "| L | kerple_log | kerple_log + docpos | ALiBi short |"
    trained = next(line for line in text.splitlines() if line.startswith("| trained |"))
    tokens = {name: f"{STEPS[name] * BATCH * SEQ / 1000:.3g}k" for name in STEPS}
    assert trained == (f"| trained | 4 steps, {tokens['plain']} tokens | 4 steps, {tokens['docpos']} tokens | "
                       f"2 steps, {tokens['alibi']} tokens |")
    assert "Not tested against kerple_log + docpos: ALiBi short, trained for another budget" in text

    rows = list(csv.DictReader(io.StringIO(table(*folders, "--reference", "kerple_log + docpos", "--format", "csv"))))
    alibi = [r for r in rows if r["method"] == "ALiBi short"]
    assert alibi and all(r["p_value"] == "" and r["across_budgets"] == "True" for r in alibi)
    plain = [r for r in rows if r["method"] == "kerple_log"]
    assert plain and all(r["p_value"] != "" for r in plain)  # the same budget: tested
    asked = list(csv.DictReader(io.StringIO(table(*folders, "--reference", "kerple_log + docpos", "--format", "csv",
                                                  "--test-across-budgets"))))
    assert all(r["p_value"] != "" for r in asked if r["method"] == "ALiBi short")


def test_globs_filters_and_renames(evaluated):
    text = table(str(evaluated / "*" / "results"), str(evaluated / "second"), "--name", "ALiBi*", "kerple_log",
                 "--length", "128", "--rename", "kerple_log=KERPLE-log")
    header = next(line for line in text.splitlines() if line.startswith("| L |"))
    assert header == "| L | KERPLE-log | ALiBi short |"
    assert [line.split(" |")[0] for line in text.splitlines() if line.startswith("| 128")] == ["| 128 (2×)"]
    assert not [line for line in text.splitlines() if line.startswith("| 64")]

    refused = run_script(["-m", "tools.analysis.make_tables", str(evaluated / "*" / "results"),
                          "--rename", "kerple_log=Same", "--rename", "kerple_log + docpos=Same"])
    assert_clear_error(refused, "two different runs are labelled 'Same' (dataset ", "give the runs different run-names")
    with pytest.raises(ResultFileError, match="--rename: no run is called 'nope'"):
        table(str(evaluated / "second"), "--rename", "nope=X")


def test_figure_over_two_folders_tells_every_variant_apart(evaluated, tmp_path):
    folders = [str(evaluated / "docpos" / "results"), str(evaluated / "plain" / "results"), str(evaluated / "second")]
    plot_lengths.main([*folders, "--out", str(tmp_path / "variants")])
    assert (tmp_path / "variants.png").stat().st_size > 1000

    fig = plot_perplexity_vs_length(read_paths(folders))
    ax = fig.axes[0]
    lines = {line.get_label().split(" (")[0]: line for line in ax.lines}
    plain, docpos, alibi = lines["kerple_log"], lines["kerple_log + docpos"], lines["ALiBi short"]
    assert plain.get_color() == docpos.get_color() != alibi.get_color()  # one colour per base method
    assert (plain.get_linestyle(), plain.get_marker()) != (docpos.get_linestyle(), docpos.get_marker())
    assert ax.get_xaxis().get_data_interval()[0] <= 64 and lines["train length"].get_xdata()[0] == 64
    fig.canvas.draw()
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1  # outside the data


def test_chunk_bootstrap_band_agrees_with_scipy():
    losses = np.random.default_rng(5).normal(2.0, 0.3, 40)
    low, high = chunk_bootstrap({"chunk_losses": losses.tolist(), "ppl": float(np.exp(losses.mean()))})
    reference = stats.bootstrap((losses,), np.mean, method="percentile", n_resamples=20 * BOOTSTRAP_SAMPLES,
                                random_state=1).confidence_interval
    assert low == pytest.approx(np.exp(reference.low), rel=0.01)
    assert high == pytest.approx(np.exp(reference.high), rel=0.01)


def test_probe_heatmaps_show_accuracy_rank_or_nll(tmp_path):
    depths, samples, answer_tokens = [0.0, 1.0], 3, 4
    logprob = np.array([[-0.4, -0.8, -1.2], [-8.0, -6.0, -10.0]])  # [depth, sample]: the far needle is lost
    rank = np.array([[0.0, 0.25, 0.0], [12.0, 7.5, 30.0]])
    record = {"length": 64, "mode": "passkey", "loss": float(-logprob.mean() / answer_tokens), "ppl": 1.0,
              "tokens": logprob.size * answer_tokens, "chunks": logprob.size, "stderr": None,
              "chunk_starts": list(range(logprob.size)), "chunk_losses": (-logprob / answer_tokens).ravel().tolist(),
              "probe_depths": depths, "probe_samples": samples, "depth_rank": rank.mean(axis=1).tolist(),
              "depth_top1": [2 / 3, 0.0], "depth_accuracy": [1 / 3, 0.0]}
    document = {"path": "made.json", "results": [record],
                "run": {"method": "kerple_log", "label": "KERPLE-log", "seed": 1}}
    _, _, nll, _ = quantity_grid(document, "passkey", "nll")
    np.testing.assert_allclose(nll[0], [2.4 / 3 / 4, 24.0 / 3 / 4], rtol=1e-12)
    _, _, ranks, _ = quantity_grid(document, "passkey", "rank")
    np.testing.assert_allclose(ranks[0], [0.25 / 3, 49.5 / 3], rtol=1e-12)
    _, _, accuracy, _ = quantity_grid(document, "passkey", "accuracy")
    np.testing.assert_allclose(accuracy[0], [1 / 3, 0.0])
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"schema": "neox-eval/1", "results": [record], "run": {
        "name": "x", "method": "kerple_log", "pos_emb": "kerple_log", "seed": 1, "dataset": "stdlib",
        "train_length": 64, "checkpoint_step": 1, "run_name": "KERPLE-log", "label": "KERPLE-log"}}))
    plot_probe.main([str(path), "--show", "rank", "--out", str(tmp_path / "rank")])
    assert (tmp_path / "rank.png").stat().st_size > 1000
