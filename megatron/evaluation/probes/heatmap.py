"""Retrieval-probe heatmaps: accuracy over (evaluation length x needle depth), one panel per result
file, for the `passkey` or the `kv-retrieval` mode. evaluate.py draws one next to each result file it
writes, per probe mode in eval-modes; `python -m tools.analysis.plot_probe` draws several side by side.
Accuracy is greedy exact match, or teacher-forced top-1 (every answer token the argmax) when
probe-greedy was off.
"""
import pathlib

import numpy as np

from ..figures import plt, save_figure
from ..results import ResultFileError, load_result

CONFIGS = {"passkey": "configs/eval/probe.yml", "kv-retrieval": "configs/eval/kv_retrieval.yml"}


def accuracy_grid(document: dict, mode: str = "passkey"):
    """(lengths, depths, accuracy [lengths, depths], what) of one result file's `mode` records."""
    records = sorted((r for r in document["results"] if r["mode"] == mode and "skipped" not in r),
                     key=lambda r: r["length"])
    if not records:
        raise ResultFileError(f"{document.get('path', 'the result')} has no {mode} records; evaluate with "
                              f"`{mode}` in eval-modes ({CONFIGS[mode]})")
    greedy = all(r["depth_accuracy"] is not None for r in records)
    rows = [r["depth_accuracy"] if greedy else r["depth_top1"] for r in records]
    return ([r["length"] for r in records], records[0]["probe_depths"], np.array(rows),
            "greedy exact match" if greedy else "teacher-forced top-1")


def draw_panel(ax, lengths, depths, grid, title, fontsize=6):
    """One heatmap: accuracy [lengths, depths] in [0, 1], each cell labelled; returns the image."""
    image = ax.imshow(grid.T, vmin=0, vmax=1, cmap="viridis", aspect="auto", origin="lower")
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], rotation=45)
    ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths])
    ax.set_title(title, fontsize=8)
    for (i, j), value in np.ndenumerate(grid):
        ax.text(i, j, f"{value:.2f}", ha="center", va="center", fontsize=fontsize,
                color="white" if value < 0.5 else "black")
    return image


def plot_heatmaps(documents: list[dict], stem, mode: str = "passkey") -> list[pathlib.Path]:
    fig, axes = plt.subplots(1, len(documents), figsize=(3.2 * len(documents) + 1, 3.2), squeeze=False)
    for ax, document in zip(axes[0], documents):
        lengths, depths, grid, what = accuracy_grid(document, mode)
        image = draw_panel(ax, lengths, depths, grid,
                           f"{mode}: {document['run'].get('label') or document['run']['method']} "
                           f"(seed {document['run']['seed']})\n{what}")
        ax.set_xlabel("evaluation length")
    axes[0][0].set_ylabel("needle depth" if mode == "passkey" else "queried pair's depth")
    fig.colorbar(image, ax=axes[0].tolist(), label="accuracy")
    paths = save_figure(fig, stem)
    plt.close(fig)
    return paths


def heatmap_of_file(path, mode: str = "passkey") -> list[pathlib.Path]:
    """The heatmap of one result file's `mode` records, written next to it as <name>_<mode>.png/.pdf."""
    path = pathlib.Path(path)
    return plot_heatmaps([load_result(path)], path.with_name(f"{path.stem}_{mode}"), mode)
