"""The KERPLE paper's own numbers (NeurIPS 2022, Tables 3 and 4), typed in as data.

Source: ../shared/spec/evaluation-protocol.md (a subset of Table 3). The paper trained at 512 tokens
on Pile subsets with a 162M model; these numbers are the paper's and are only ever shown labelled so.
"""
PAPER_TRAIN_LENGTH = 512

# Our corpora beside the paper's nearest domains (code, English prose, LaTeX papers).
DEFAULT_DATASET_MAP = {"stdlib": "GitHub", "prose": "OpenWebText2", "latex": "ArXiv"}

_METHODS = ("kerple_log", "kerple_power", "alibi", "t5", "rotary", "sinusoidal")
_TABLE3_ROWS = {
    ("OpenWebText2", 512): "23.9 0.6 | 23.9 0.6 | 23.9 0.6 | 23.7 0.6 | 24.2 0.6 | 33 1",
    ("OpenWebText2", 2048): "21.6 0.3 | 21.9 0.2 | 22.5 0.2 | 21.7 0.2 | 62.4 6.1 | 5507 2607",
    ("OpenWebText2", 16384): "21.4 0.6 | 21.6 0.6 | 22.5 0.5 | 31.4 3.1 | 269 33 | 30046 4824",
    ("GitHub", 512): "3.40 0.20 | 3.42 0.20 | 3.42 0.21 | 3.38 0.21 | 3.44 0.20 | 4 0.2",
    ("GitHub", 2048): "2.86 0.10 | 2.90 0.08 | 3.13 0.10 | 2.84 0.09 | 5.94 0.64 | 1380 404",
    ("GitHub", 16384): "2.75 0.16 | 2.76 0.13 | 3.02 0.13 | 3.35 0.27 | 31.3 5.2 | 16443 8503",
    ("ArXiv", 512): "6.07 0.26 | 6.10 0.26 | 6.12 0.26 | 6.03 0.26 | 6.07 0.27 | 43 44",
    ("ArXiv", 2048): "5.22 0.12 | 5.26 0.13 | 5.71 0.14 | 5.21 0.14 | 14.2 1.8 | 730 343",
    ("ArXiv", 16384): "5.07 0.16 | 5.07 0.19 | 5.78 0.15 | 6.25 0.61 | 85.4 7.4 | 6674 5696",
}

# (paper dataset, paper length, method) -> (mean ppl, std ppl). Typed as the paper printed them ("4 0.2"
# beside "3.40 0.20"); tables show them at the precision of their own cells (make_tables.fmt: 4.00 ± 0.20).
TABLE3 = {
    (data, length, method): tuple(float(number) for number in cell.split())
    for (data, length), row in _TABLE3_ROWS.items()
    for method, cell in zip(_METHODS, row.split(" | "))
}

# Seconds per training step on one A100, GitHub.
TABLE4 = {"kerple_log": 0.307, "kerple_power": 0.321, "alibi": 0.302, "t5": 0.340, "rotary": 0.332,
          "sinusoidal": 0.298}


def paper_cell(paper_dataset: str, ratio: float, method: str) -> tuple[float, float] | None:
    """The paper's (mean, std) at the same extrapolation ratio (L / train length), if it printed one."""
    return TABLE3.get((paper_dataset, round(ratio * PAPER_TRAIN_LENGTH), method))


# The paper's names of its methods, for sentences; a method it does not name is called by its pos-emb.
NAMES = {"kerple_log": "KERPLE-log", "kerple_power": "KERPLE-power", "alibi": "ALiBi", "t5": "T5"}


def method_name(method: str) -> str:
    return NAMES.get(method, method)
