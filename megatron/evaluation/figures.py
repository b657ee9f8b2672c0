"""Saving a figure as PNG + PDF, matplotlib drawing to files only (no display on a cluster). Here,
not in tools/analysis, because evaluate.py draws the probe heatmaps itself (probes/heatmap.py) and
entry points import nothing from tools/; the analysis tools draw with the same `plt`."""
import pathlib

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

__all__ = ["plt", "save_figure"]


def save_figure(fig, stem, suffixes=(".png", ".pdf")) -> list[pathlib.Path]:
    """Write `stem`.png and `stem`.pdf (or the `suffixes` asked for); return the paths."""
    stem = pathlib.Path(stem)
    stem.parent.mkdir(parents=True, exist_ok=True)
    paths = [stem.with_suffix(suffix) for suffix in suffixes]
    for path in paths:
        fig.savefig(path, dpi=150, bbox_inches="tight")
    return paths
