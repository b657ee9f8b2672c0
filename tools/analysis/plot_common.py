"""What every figure shares: a fixed colour per base method, a line style and marker per variant of it
(its hybrid, its DAPE wrapper, its windowed or named runs), and saving as PNG + PDF
(megatron/evaluation/figures.py, which evaluate.py draws with too)."""
import math

from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullFormatter

from megatron.evaluation.figures import plt, save_figure  # noqa: F401 (every figure tool saves with it)
from megatron.evaluation.identity import Method
from megatron.model.positional_embeddings import available

_PALETTE = plt.get_cmap("tab10").colors + plt.get_cmap("Dark2").colors


def method_color(method: Method):
    """Same colour for a method in every figure; a windowed variant is drawn dashed in its base's colour."""
    methods = available()  # the registry's order, as the config's pos-emb choices
    rank = methods.index(method.pos_emb) if method.pos_emb in methods else len(methods)
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


# Candidate tick mantissas, coarse to fine: a log axis is labelled with the finest set that puts 3-12 ticks in
# its range, no gap wider than MAX_GAP of it and none narrower than MIN_GAP (labels that would touch);
# matplotlib's own log ticks leave 7.2-9.6 with two labels and 4.5-25 with none between 10 and 20.
TICK_MANTISSAS = ((1,), (1, 2, 5), (1, 2, 3, 5), (1, 1.5, 2, 3, 4, 5, 6, 8), tuple(range(1, 10)),
                  (1, 1.2, 1.4, 1.6, 1.8, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5, 6, 6.5, 7, 7.5, 8, 8.5, 9, 9.5))
MAX_GAP, MIN_GAP = 0.35, 0.04


def log_ticks(low: float, high: float) -> list[float] | None:
    """Plain-number ticks for a log axis from low to high (both > 0), or None: no candidate set fits."""
    span = math.log(high / low)
    for mantissas in reversed(TICK_MANTISSAS):
        ticks = [m * 10.0 ** k for k in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
                 for m in mantissas if low <= m * 10.0 ** k <= high]
        edges = [low, *ticks, high]
        widest = max(math.log(b / a) for a, b in zip(edges, edges[1:]))
        closest = min((math.log(b / a) for a, b in zip(ticks, ticks[1:])), default=0.0)
        if 3 <= len(ticks) <= 12 and widest <= MAX_GAP * span and closest >= MIN_GAP * span:
            return [float(f"{t:.6g}") for t in ticks]
    return None


def plain_numbers(axis) -> None:
    """Label a log axis with plain numbers (32, 64, 3.5, 15; never 2^5 or 6x10^0) spread over its whole range
    (call after plotting: it reads the range); evenly spaced linear steps where no log set fits (a range
    narrower than 1.3x)."""
    low, high = sorted(axis.get_view_interval())
    ticks = log_ticks(max(low, 1e-300), high)
    axis.set_major_locator(FixedLocator(ticks) if ticks else MaxNLocator(nbins=5, steps=[1, 2, 2.5, 5, 10]))
    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(NullFormatter())
