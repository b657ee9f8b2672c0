"""Retrieval-probe heatmaps: accuracy over (evaluation length x needle depth), one panel per result
file, for the `passkey` or the `kv-retrieval` mode. evaluate.py draws one next to each result file it
writes, per probe mode in eval-modes; `python -m tools.analysis.plot_probe` draws several side by side.
Accuracy is greedy exact match, or teacher-forced top-1 (every answer token the argmax) when
probe-greedy was off. For models that do not retrieve yet, the same grid can show the answer's mean
teacher-forced rank (`rank`: 0 is the argmax) or its NLL per answer token (`nll`, nats), which move long
before accuracy does.
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


QUANTITIES = {  # quantity -> (record field per depth, colour-bar label, higher is better)
    "accuracy": (None, "accuracy", True),
    "rank": ("depth_rank", "answer rank (mean, 0 = top)", False),
    "nll": (None, "answer NLL (nats per token)", False),
}


def quantity_grid(document: dict, mode: str, quantity: str):
    """(lengths, depths, grid [lengths, depths], what) of `quantity` (QUANTITIES) in one result file."""
    if quantity == "accuracy":
        return accuracy_grid(document, mode)
    lengths, depths, _, _ = accuracy_grid(document, mode)  # its checks and its order
    records = sorted((r for r in document["results"] if r["mode"] == mode and "skipped" not in r),
                     key=lambda r: r["length"])
    if quantity == "rank":
        rows = [r["depth_rank"] for r in records]
    else:  # the samples' per-token NLL (the record's chunk losses, depth-major) averaged per depth
        rows = [np.asarray(r["chunk_losses"]).reshape(len(r["probe_depths"]), -1).mean(axis=1) for r in records]
    return lengths, depths, np.array(rows, dtype=float), "teacher-forced"


def draw_panel(ax, lengths, depths, grid, title, fontsize=6, vmin=0.0, vmax=1.0, cmap="viridis"):
    """One heatmap: `grid` [lengths, depths] (accuracy in [0, 1] unless told), each cell labelled;
    returns the image."""
    image = ax.imshow(grid.T, vmin=vmin, vmax=vmax, cmap=cmap, aspect="auto", origin="lower")
    ax.set_xticks(range(len(lengths)), [str(n) for n in lengths], rotation=45)
    ax.set_yticks(range(len(depths)), [f"{d:g}" for d in depths])
    ax.set_title(title, fontsize=8)
    for (i, j), value in np.ndenumerate(grid):
        red, green, blue, _ = image.cmap(image.norm(value))
        dark = 0.299 * red + 0.587 * green + 0.114 * blue < 0.5  # the cell's luminance: white text on dark
        ax.text(i, j, f"{value:.2f}" if abs(value) < 100 else f"{value:.0f}", ha="center", va="center",
                fontsize=fontsize, color="white" if dark else "black")
    return image


def plot_heatmaps(documents: list[dict], stem, mode: str = "passkey", quantity: str = "accuracy") -> list[pathlib.Path]:
    fig, axes = plt.subplots(1, len(documents), figsize=(3.2 * len(documents) + 1, 3.2), squeeze=False)
    grids = [quantity_grid(document, mode, quantity) for document in documents]
    _, label, higher_better = QUANTITIES[quantity]
    # accuracy on [0, 1]; rank and NLL on one scale shared by the panels, dark = bad as for accuracy
    vmin, vmax = (0.0, 1.0) if quantity == "accuracy" else (0.0, max(float(g[2].max()) for g in grids) or 1.0)
    for ax, document, (lengths, depths, grid, what) in zip(axes[0], documents, grids):
        image = draw_panel(ax, lengths, depths, grid,
                           f"{mode}: {document['run'].get('label') or document['run']['method']} "
                           f"(seed {document['run']['seed']})\n{what}", vmin=vmin, vmax=vmax,
                           cmap="viridis" if higher_better else "viridis_r")
        ax.set_xlabel("evaluation length")
    axes[0][0].set_ylabel("needle depth" if mode == "passkey" else "queried pair's depth")
    fig.colorbar(image, ax=axes[0].tolist(), label=label)
    paths = save_figure(fig, stem)
    plt.close(fig)
    return paths


def heatmap_of_file(path, mode: str = "passkey") -> list[pathlib.Path]:
    """The heatmap of one result file's `mode` records, written next to it as <name>_<mode>.png/.pdf."""
    path = pathlib.Path(path)
    return plot_heatmaps([load_result(path)], path.with_name(f"{path.stem}_{mode}"), mode)
