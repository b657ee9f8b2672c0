"""What every figure shares: a fixed colour per base method, a line style and marker per variant of it
(its hybrid, its DAPE wrapper, its windowed or named runs), and saving as PNG + PDF
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


# The k-th run of one base method (in the tables' order) is drawn with the k-th style and marker; the
# two sequences have coprime lengths, so the pairs repeat only after 20 variants of one method.
VARIANT_LINESTYLES = ("-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1, 1, 1)))
VARIANT_MARKERS = ("o", "s", "^", "D")


def variant_styles(methods) -> dict:
    """{method: (linestyle, marker)}: the variants of one base method (same colour) told apart."""
    styles, count = {}, {}
    for method in methods:  # in the order given, which callers sort with results_index.method_sort_key
        k = count.get(method.pos_emb, 0)
        count[method.pos_emb] = k + 1
        styles[method] = (VARIANT_LINESTYLES[k % len(VARIANT_LINESTYLES)], VARIANT_MARKERS[k % len(VARIANT_MARKERS)])
    return styles


def legend_outside(ax, **kwargs) -> None:
    """The legend right of the axes, never over the data (save_figure's tight box keeps it in the file)."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0, fontsize=8, **kwargs)


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
