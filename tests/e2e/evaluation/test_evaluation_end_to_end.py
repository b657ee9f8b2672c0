"""Train two tiny models on the built-in corpus, evaluate them at 1x-8x their length in every mode,
and read the results back with the table and figure tools."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats
from tests.support.training import free_port

from megatron.checkpoint.checkpointing import CheckpointError
from megatron.evaluation.results import find_record, load_result, load_results
from megatron.evaluation.driver import evaluate_run
from megatron.evaluation.run import EvaluationError
from megatron.neox_arguments import NeoXArgs
from tools.analysis import plot_kernels
from tools.analysis.make_tables import build_table3
from tools.analysis.plot_kernels import load_positional_embeddings, plot_kernel
from tools.analysis.plot_position import plot_position_perplexity


REPO = pathlib.Path(__file__).resolve().parents[3]
TRAIN_LENGTH, STEPS = 64, 120
LENGTHS = [64, 128, 256, 512]  # 1x - 8x
MODES = ["nonoverlap", "sliding", "position"]
CHUNKS = 12
METHODS = ("kerple_log", "sinusoidal")


def run(args, **kwargs):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, **kwargs)


@pytest.fixture(scope="module")
def workspace(stdlib_data, tmp_path_factory):
    """kerple_log and sinusoidal trained 120 steps by train.py side by side (each a single-threaded process) on the
    stdlib_data slice (the corpus command itself: tests/e2e/data/test_data_corpus.py); learned, for its 2 steps,
    meanwhile in this process as train.py trains (tests/support/training.py's pretrain)."""
    from tests.support.training import pretrain
    root = tmp_path_factory.mktemp("extrapolation")
    common = {"data-path": stdlib_data, "split": "90,5,5", "eval-results-dir": str(root / "results")}
    configs = {}
    for method in METHODS + ("learned",):
        overrides = {**common, "pos-emb": method, "save": str(root / method), "load": str(root / method),
                     "train-iters": STEPS if method != "learned" else 2, "checkpoint-factor": STEPS,
                     "eval-iters": 0, "log-interval": STEPS}
        configs[method] = root / f"{method}.yml"
        configs[method].write_text(json.dumps(overrides))
    trainings = {m: subprocess.Popen([sys.executable, "train.py", "configs/tiny.yml", str(configs[m])], cwd=REPO,
                                     env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
                 for m in METHODS}
    pretrain(neox_args(configs["learned"]))
    for method, process in trainings.items():
        output = process.communicate()[0]
        assert process.returncode == 0, f"training {method} failed:\n{output[-3000:]}"
    return root, configs


def neox_args(config, **overrides):
    return NeoXArgs.from_ymls([REPO / "configs" / "tiny.yml", config], overrides)


@pytest.fixture(scope="module")
def results(workspace):
    root, configs = workspace
    settings = {"eval_lengths": LENGTHS, "eval_modes": MODES, "eval_chunks": CHUNKS, "eval_seed": 3}
    return {m: load_result(evaluate_run(neox_args(configs[m], **settings).evaluation_run())) for m in METHODS}


def test_result_files_hold_every_length_and_mode_with_consistent_numbers(results):
    for method, document in results.items():
        run_info = document["run"]
        assert (run_info["pos_emb"], run_info["seed"], run_info["dataset"]) == (method, 1234, "stdlib")
        assert (run_info["train_length"], run_info["checkpoint_step"]) == (TRAIN_LENGTH, STEPS)
        assert len(run_info["config_hash"]) == 64
        for length in LENGTHS:
            for mode in MODES:
                record = find_record(document, length, mode)
                assert record["chunks"] == CHUNKS and record["tokens"] == CHUNKS * length
                assert record["ppl"] == pytest.approx(np.exp(record["loss"]))
                assert record["loss"] == pytest.approx(np.mean(record["chunk_losses"]))
                assert record["stderr"] == pytest.approx(stats.sem(record["chunk_losses"]))
                assert all(c % length == 0 for c in record["chunk_starts"])
            assert find_record(document, length, "sliding")["stride"] == length // 2
            position = find_record(document, length, "position")
            assert len(position["position_loss"]) == length
            assert np.mean(position["position_loss"]) == pytest.approx(position["loss"])
            assert position["loss"] == find_record(document, length, "nonoverlap")["loss"]


def test_every_model_is_scored_on_the_same_chunks(results):
    kerple, sinusoidal = results["kerple_log"], results["sinusoidal"]
    assert kerple["evaluation"]["stream_sha256"] == sinusoidal["evaluation"]["stream_sha256"]
    for length in LENGTHS:
        for mode in MODES:
            assert (find_record(kerple, length, mode)["chunk_starts"]
                    == find_record(sinusoidal, length, mode)["chunk_starts"])
    assert len({tuple(find_record(kerple, L, "nonoverlap")["chunk_starts"]) for L in LENGTHS}) == len(LENGTHS)


def test_sliding_scores_no_worse_than_nonoverlap_at_the_training_length(results):
    """At L = train length with stride L/2 the second half of each chunk is scored by the chunk itself,
    so the whole difference is the first half, which sliding scores with 33-64 tokens of context
    instead of 1-32: a relative method that learned anything does better there."""
    record = find_record(results["kerple_log"], TRAIN_LENGTH, "sliding")
    nonoverlap = find_record(results["kerple_log"], TRAIN_LENGTH, "nonoverlap")
    assert record["loss"] < nonoverlap["loss"]


def test_the_table_pairs_the_two_runs_over_chunks(results, workspace):
    table = build_table3(load_results(workspace[0] / "results"))
    for length in LENGTHS:
        cell = table.cells["stdlib", "sinusoidal", length]
        reference = find_record(results["kerple_log"], length, "nonoverlap")["chunk_losses"]
        other = find_record(results["sinusoidal"], length, "nonoverlap")["chunk_losses"]
        assert cell.comparison.over == "chunks"
        assert cell.comparison.p_value == pytest.approx(stats.ttest_rel(reference, other).pvalue)


def test_position_figure_and_kernel_figure_from_the_trained_runs(results, workspace, tmp_path):
    fig = plot_position_perplexity(load_results(workspace[0] / "results"), 512)
    assert len(fig.axes[0].lines) == len(METHODS) + 1  # + the train-length marker
    args = neox_args(workspace[1]["kerple_log"])
    modules, step = load_positional_embeddings(args)
    assert step == STEPS and len(modules) == 1
    assert len(plot_kernel(modules[0], 256, "kerple_log").axes[0].lines) == args.num_attention_heads
    plot_kernels.main([str(REPO / "configs" / "tiny.yml"), str(workspace[1]["kerple_log"]), "--out",
                       str(tmp_path / "kernel")])
    assert (tmp_path / "kernel.png").stat().st_size > 1000 and (tmp_path / "kernel.pdf").is_file()


def test_learned_beyond_its_positions_is_recorded_as_skipped(workspace, tmp_path):
    args = neox_args(workspace[1]["learned"], eval_lengths=[64, 128], eval_modes=["nonoverlap"],
                     eval_chunks=2, eval_results_dir=str(tmp_path))
    document = load_result(evaluate_run(args.evaluation_run()))
    assert "loss" in find_record(document, 64, "nonoverlap")
    skipped = find_record(document, 128, "nonoverlap")["skipped"]
    assert skipped.startswith("pos-emb learned embeds at most 64 positions (max-position-embeddings)")


def test_a_missing_checkpoint_is_a_hard_error_and_writes_nothing(workspace, tmp_path):
    config = workspace[1]["kerple_log"]
    with pytest.raises(EvaluationError, match="checkpoint folder .*nowhere \\(key `load`\\) does not exist"):
        evaluate_run(neox_args(config, load=str(tmp_path / "nowhere"), eval_results_dir=str(tmp_path)).evaluation_run())
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError):
        evaluate_run(neox_args(config, load=str(tmp_path / "empty"), eval_results_dir=str(tmp_path)).evaluation_run())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty"]

    cli = run(["evaluate.py", "configs/tiny.yml", str(config), "--set", f"load={tmp_path / 'nowhere'}",
               "--set", f"eval-results-dir={tmp_path / 'out'}"], cwd=REPO)
    assert cli.returncode != 0 and "Traceback" not in cli.stderr
    assert f"error: checkpoint folder {tmp_path / 'nowhere'} (key `load`) does not exist" in cli.stderr
    assert not (tmp_path / "out").exists()


def test_run_identity_comes_from_the_checkpoint_not_the_evaluating_config(workspace, results, tmp_path):
    args = neox_args(workspace[1]["kerple_log"], seed=999, eval_lengths=[64], eval_modes=["nonoverlap"],
                     eval_chunks=1, eval_results_dir=str(tmp_path), num_workers=3)
    run_info = load_result(evaluate_run(args.evaluation_run()))["run"]
    assert run_info["seed"] == 1234 and run_info["config_hash"] == results["kerple_log"]["run"]["config_hash"]


@pytest.mark.slow
def test_deepy_on_two_ranks_writes_the_same_result_as_one_process(workspace, results, tmp_path):
    """`python deepy.py evaluate.py ...` with two CPU ranks: each scores half of the chunks."""
    launched = run(["deepy.py", "evaluate.py", "configs/tiny.yml", str(workspace[1]["kerple_log"]),
                    "--set", "num_gpus=2", "--set", f"master_port={free_port()}", "--set", f"eval-results-dir={tmp_path}",
                    "--set", f"eval-lengths={LENGTHS}", "--set", "eval-modes=[nonoverlap,sliding]",
                    "--set", f"eval-chunks={CHUNKS}", "--set", "eval-seed=3"], cwd=REPO, timeout=600)
    assert launched.returncode == 0, launched.stdout[-3000:] + launched.stderr[-3000:]
    (path,) = tmp_path.glob("*.json")
    document = load_result(path)
    assert document["evaluation"]["ranks"] == 2
    assert document["run"]["name"] == results["kerple_log"]["run"]["name"]
    for record in document["results"]:
        single = find_record(results["kerple_log"], record["length"], record["mode"])
        assert record["chunk_starts"] == single["chunk_starts"]
        np.testing.assert_allclose(record["chunk_losses"], single["chunk_losses"], rtol=1e-6)
