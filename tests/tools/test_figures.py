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


@pytest.fixture(autouse=True)
def _close_figures():
    """Every figure a test drew is closed after it (pyplot keeps them open, and warns past 20)."""
    yield
    from tools.analysis.plot_common import plt
    plt.close("all")


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


@pytest.mark.parametrize("low,high", [(11.0, 19.0), (7.2, 9.6), (4.5, 25.0), (7.0, 50.0), (5.0, 5000.0),
                                      (0.8, 1.3), (7.3, 8.1)])
def test_log_axes_label_plain_numbers_over_the_whole_range(low, high):
    """At least three labelled ticks inside the range, in its lower and its upper part, written as plain
    numbers (matplotlib's log ticks label nothing between 10 and 20 and only 8 and 9 in 7.2-9.6)."""
    from tools.analysis.plot_common import plain_numbers, plt
    fig, ax = plt.subplots()
    ax.plot([1, 2], [low, high])
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    plain_numbers(ax.yaxis)
    fig.canvas.draw()
    labels = [(t.get_loc(), t.label1.get_text()) for t in ax.yaxis.get_major_ticks() + ax.yaxis.get_minor_ticks()
              if low <= t.get_loc() <= high and t.label1.get_text()]
    assert len(labels) >= 3, labels
    span = high / low
    assert min(v for v, _ in labels) <= low * span ** 0.4 and max(v for v, _ in labels) >= low * span ** 0.6, labels
    for value, text in labels:
        assert float(text) == pytest.approx(value) and "^" not in text and "times" not in text


def test_perplexity_bands_are_of_one_kind_per_figure(tmp_path):
    folder = write_runs(tmp_path / "r")  # two seeds each
    (folder / "stdlib_alibi_seed2.json").unlink()  # alibi: one seed
    fig = plot_perplexity_vs_length(load_results(folder))
    ax = fig.axes[0]
    captions = [t.get_text() for t in fig.texts]
    assert captions == ["bands: ± 1 std over seeds (of the loss); runs with one seed have no band"]
    drawn = [c for c in ax.collections if any(np.isfinite(p.vertices).all() and len(p.vertices) for p in c.get_paths())]
    assert len(drawn) == len(METHODS) - 1  # alibi has none
    for path in folder.glob("*_seed2.json"):
        path.unlink()  # every run one seed: every band is the chunk bootstrap
    fig = plot_perplexity_vs_length(load_results(folder))
    assert [t.get_text() for t in fig.texts] == ["bands: 95% bootstrap interval over evaluation chunks (every run "
                                                 "has one seed)"]


def test_ruler_figure_has_one_legend_and_a_page_width(tmp_path):
    from tools.analysis.plot_ruler import plot_ruler
    tasks = ("niah_single_1", "niah_multikey_2", "niah_multikey_3", "ruler_vt", "ruler_cwe", "ruler_fwe")
    documents = [{"run": {"method": m, "pos_emb": m.split("+")[0], "seed": 1, "train_length": 64,
                          "attention_window": 64 if "+window" in m else None},
                  "ruler": {t: {str(n): {"score": 0.5, "ci95": [0.4, 0.6], "n": 4, "scores": [0, 1, 0, 1],
                                         "doc_ids": [0, 1, 2, 3]} for n in (512, 1024, 2048)} for t in tasks}}
                 for m in ("kerple_log", "alibi", "t5", "sinusoidal", "kerple_log+window64")]
    fig = plot_ruler(documents)
    assert len(fig.legends) == 1 and not any(ax.get_legend() for ax in fig.axes)
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(labels) == 5 + 2 and labels[-1].startswith("bands: bootstrap 95% interval")
    png = save_figure(fig, tmp_path / "ruler")[0]
    from PIL import Image
    width, height = Image.open(png).size
    assert width <= 1600 and height <= 1400, (width, height)


def test_censored_effective_lengths_are_marked_on_the_figure():
    from megatron.evaluation.identity import Method
    from tools.analysis.plot_effective_length import plot_effective_length
    e = {"reference": 64, "low": 512, "high": 2048, "defined": 1.0, "longest": 2048, "train_length": 64}
    by_measure = {"ppl (nonoverlap)": {Method("kerple_log", None, None): {**e, "effective": 2048},
                                       Method("sinusoidal", None, None): {**e, "effective": 64, "low": 64, "high": 64}}}
    ax = plot_effective_length(by_measure, 0.85, 1.2).axes[0]
    assert [t.get_text() for t in ax.texts] == ["≥"]  # over kerple_log's bar only
    assert any(t.get_text().startswith("≥: nothing failed") for t in ax.get_legend().get_texts())
