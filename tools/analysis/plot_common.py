"""What every figure shares: a fixed colour per method, and saving as PNG + PDF
(megatron/evaluation/figures.py, which evaluate.py draws with too)."""
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from megatron.evaluation.figures import plt, save_figure  # noqa: F401 (every figure tool saves with it)
from megatron.evaluation.identity import Method
from megatron.neox_arguments.groups import POS_EMB_CHOICES

_PALETTE = plt.get_cmap("tab10").colors + plt.get_cmap("Dark2").colors


def method_color(method: Method):
    """Same colour for a method in every figure; a windowed variant is drawn dashed in its base's colour."""
    rank = POS_EMB_CHOICES.index(method.pos_emb) if method.pos_emb in POS_EMB_CHOICES else len(POS_EMB_CHOICES)
    return _PALETTE[rank % len(_PALETTE)]


def method_linestyle(method: Method) -> str:
    return "--" if method.window else "-"


def plain_numbers(axis) -> None:
    """Label a log axis 32, 64, 3.5 rather than 2^5, 6x10^0 (call after plotting: it reads the range).
    Within a decade every minor tick gets a label; wider ranges label 1, 2, 5 x 10^k only."""
    low, high = sorted(axis.get_view_interval())
    label = FuncFormatter(lambda value, _: f"{value:g}")
    if high / max(low, 1e-300) > 10:
        axis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        axis.set_minor_formatter(NullFormatter())
    else:
        axis.set_minor_formatter(label)
    axis.set_major_formatter(label)
