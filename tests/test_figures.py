"""The figure tools draw one line per method (or head) and write non-empty PNG and PDF files."""
import numpy as np
import pytest

from megatron.evaluation.modes.position import position_fields
from megatron.evaluation.results import SCHEMA, ResultFileError, load_results, summarize, write_atomic
from megatron.model.positional_embeddings import build_positional_embedding
from tools.analysis import plot_lengths, plot_position
from tools.analysis.plot_common import save_figure
from tools.analysis.plot_kernels import KernelPlotError, kernel_curves, plot_kernel
from tools.analysis.plot_lengths import plot_perplexity_vs_length
from tools.analysis.plot_position import plot_position_perplexity

TRAIN = 32
METHODS = ("kerple_log", "alibi", "sinusoidal", "kerple_log+window32")


def write_runs(folder, datasets=("stdlib",), seeds=(1, 2)):
    rng = np.random.default_rng(0)
    for dataset in datasets:
        for method in METHODS:
            for seed in seeds:
                results = []
                for length in (32, 64, 128, 256):
                    growth = 0.5 * np.log2(length / TRAIN) if method == "sinusoidal" else 0.0
                    losses = 1.5 + growth + rng.normal(0, 0.05, (4, length)) - 0.2 * np.log1p(np.arange(length)) / 6
                    for mode in ("nonoverlap", "position"):
                        record = summarize(losses, length, mode, np.arange(4) * length)
                        results.append({**record, **position_fields(losses)} if mode == "position" else record)
                name = f"{dataset}_{method}_seed{seed}"
                write_atomic(folder / f"{name}.json", {
                    "schema": SCHEMA, "results": results,
                    "run": {"name": name, "method": method, "pos_emb": method.split("+")[0], "seed": seed,
                            "attention_window": TRAIN if "+window" in method else None,
                            "dataset": dataset, "train_length": TRAIN, "checkpoint_step": 10}})
    return folder


def assert_written(paths):
    assert [p.suffix for p in paths] == [".png", ".pdf"]
    assert all(p.stat().st_size > 1000 for p in paths)
    assert paths[0].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and paths[1].read_bytes()[:5] == b"%PDF-"


def test_perplexity_vs_length_has_one_line_per_method_per_dataset(tmp_path):
    fig = plot_perplexity_vs_length(load_results(write_runs(tmp_path / "r", ("prose", "stdlib"))))
    assert len(fig.axes) == 2
    for ax in fig.axes:
        labels = [line.get_label() for line in ax.lines]
        assert len(ax.lines) == len(METHODS) + 1 and labels[-1] == "train length"
        assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
        np.testing.assert_array_equal(ax.lines[0].get_xdata(), [32, 64, 128, 256])
    assert_written(save_figure(fig, tmp_path / "lengths"))


def test_perplexity_vs_length_y_values_are_seed_means(tmp_path):
    documents = load_results(write_runs(tmp_path / "r"))
    ax = plot_perplexity_vs_length(documents).axes[0]
    alibi = next(line for line in ax.lines if line.get_label().startswith("alibi"))
    expected = [np.mean([r["ppl"] for d in documents if d["run"]["method"] == "alibi" for r in d["results"]
                         if r["mode"] == "nonoverlap" and r["length"] == length]) for length in (32, 64, 128, 256)]
    np.testing.assert_allclose(alibi.get_ydata(), expected)


def test_position_figure_has_one_line_per_method_including_the_windowed_baseline(tmp_path):
    documents = load_results(write_runs(tmp_path / "r"))
    fig = plot_position_perplexity(documents, 128, smooth=4)
    ax = fig.axes[0]
    assert len(ax.lines) == len(METHODS) + 1
    assert any(line.get_label().startswith("kerple_log+window32") and line.get_linestyle() == "--" for line in ax.lines)
    assert len(ax.lines[0].get_xdata()) == 128 - 4 + 1
    assert_written(save_figure(fig, tmp_path / "position"))
    with pytest.raises(ResultFileError, match="no position records at length 100"):
        plot_position_perplexity(documents, 100)


@pytest.mark.parametrize("name,panels", [("kerple_log", 1), ("alibi", 1), ("t5", 1), ("kerple_bias_weight", 2)])
def test_kernel_figure_has_one_line_per_head(tmp_path, name, panels):
    pe = build_positional_embedding(name, num_heads=4, head_dim=16, hidden_size=64)
    fig = plot_kernel(pe, 100, name)
    assert len(fig.axes) == panels and all(len(ax.lines) == 4 for ax in fig.axes)
    assert_written(save_figure(fig, tmp_path / name))


def test_kernel_curves_are_the_bias_table_indexed_by_distance():
    pe = build_positional_embedding("kerple_log", num_heads=3, head_dim=8, hidden_size=24)
    bias, weight = kernel_curves(pe, 50)
    table, _ = pe.distance_tables(51)
    np.testing.assert_allclose(bias.numpy(), table.detach().numpy(), rtol=1e-6)
    assert weight is None
    params = pe.kernel_parameters()  # b(d) = -r1 log(1 + r2 d): an independent float64 check
    r1, r2 = (params[k].detach().double().numpy()[:, None] for k in ("r1", "r2"))
    np.testing.assert_allclose(bias.numpy(), -r1 * np.log1p(r2 * np.arange(51)), rtol=1e-5, atol=1e-6)


def test_kernel_figure_of_a_method_without_bias_is_a_clear_error():
    pe = build_positional_embedding("rotary", num_heads=4, head_dim=16, hidden_size=64)
    with pytest.raises(KernelPlotError, match="pos-emb 'rotary' adds no attention bias"):
        plot_kernel(pe, 10, "rotary")


def test_command_lines_write_png_and_pdf(tmp_path):
    results = write_runs(tmp_path / "r")
    plot_lengths.main([str(results), "--out", str(tmp_path / "a")])
    plot_position.main([str(results), "--length", "256", "--smooth", "8", "--out", str(tmp_path / "b")])
    assert_written([tmp_path / "a.png", tmp_path / "a.pdf"])
    assert_written([tmp_path / "b.png", tmp_path / "b.pdf"])
