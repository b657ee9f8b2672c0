"""The learned kernel b_h(d) per head of a checkpoint (the paper's Figures 2-4), any bias method.

    python -m tools.analysis.plot_kernels RUN_CONFIG.yml... [--set load=...] --max-distance 512 \
        --out docs/images/kernel_kerple_log

Loads the checkpoint named by `load` (megatron.checkpoint.inference_model.load: the model it describes), and plots
pe.bias(1, n): the bias of the query at position n - 1 over keys at distance d = 0..n-1 (for methods
whose bias depends only on d that is b_h(d); fire's also depends on the query position). One line per
head, labelled with the head's kernel_parameters(). kerple_bias_weight gets a second panel with its
multiplicative weight.
"""
import argparse
import sys

import torch

from .plot_common import plt, save_figure


class KernelPlotError(ValueError):
    """The method has no bias to plot, or the checkpoint cannot be read."""


def kernel_curves(pe, max_distance: int):
    """(bias[H, n], weight[H, n] | None) as float tensors over d = 0..n-1, n = max_distance + 1."""
    n = max_distance + 1
    with torch.no_grad():
        bias, weight = pe.bias(1, n), pe.weight(1, n)
    if bias is None:
        raise KernelPlotError(f"pos-emb '{pe.name}' adds no attention bias b_h(d), so it has no kernel to "
                              "plot; plot a bias method (kerple_*, alibi, t5, mep*, fire)")
    # Keys 0..n-1 seen from query n-1 sit at distances n-1..0: flip to index by d.
    flip = lambda t: None if t is None else t[:, 0].flip(-1).float().cpu()  # noqa: E731
    return flip(bias), flip(weight)


def _head_labels(pe):
    parameters = {k: v.detach().float().cpu() for k, v in pe.kernel_parameters().items()}
    return [f"head {h}" + "".join(f", {k}={v[h]:.3g}" for k, v in parameters.items())
            for h in range(pe.num_heads)]


def plot_kernel(pe, max_distance: int, title: str):
    bias, weight = kernel_curves(pe, max_distance)
    panels = [("bias $b_h(d)$", bias)] + ([("score weight", weight)] if weight is not None else [])
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels), 4), squeeze=False)
    d = torch.arange(max_distance + 1)
    for ax, (ylabel, curves) in zip(axes[0], panels):
        for curve, label in zip(curves, _head_labels(pe)):
            ax.plot(d, curve, linewidth=1.2, label=label)
        # One steep head (power kernels reach -1e4 and beyond) would flatten the others on a linear
        # axis: past three decades of range, symlog keeps every head readable.
        extent = max(float(abs(c).max()) for c in curves)
        if extent > 1000:
            ax.set_yscale("symlog", linthresh=1.0)
            ylabel += " (symlog)"
        ax.set_xlabel("distance d = i - j")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, ncol=2 if pe.num_heads > 6 else 1)
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def load_positional_embeddings(neox_args):
    """The trained model's distinct positional modules (one when shared) and the checkpoint step."""
    from megatron.checkpoint.inference_model import load

    loaded = load(neox_args.load, neox_args.inference_run(), device="cpu")
    return loaded.model.positional_embeddings(), loaded.step


def main(argv=None):
    from megatron.neox_arguments import NeoXArgs, parse_overrides

    parser = argparse.ArgumentParser(description="Plot a checkpoint's kernel b_h(d) per head (PNG + PDF).")
    parser.add_argument("configs", nargs="*", help="YAML configs (default none: --set load=CHECKPOINT is enough, "
                        "the model comes from the checkpoint)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a key")
    parser.add_argument("--max-distance", type=int, default=None, help="largest d; default 4 x seq-length")
    parser.add_argument("--layer", type=int, default=0, help="which layer's kernel when pos-emb-per-layer")
    parser.add_argument("--out", required=True, help="output path without extension")
    args = parser.parse_args(argv)

    neox_args = NeoXArgs.from_ymls(args.configs, parse_overrides(args.set))
    modules, iteration = load_positional_embeddings(neox_args)
    pe = modules[min(args.layer, len(modules) - 1)]
    max_distance = args.max_distance or 4 * neox_args.seq_length
    layer = f", layer {args.layer}" if len(modules) > 1 else ""
    title = f"{neox_args.pos_emb} kernel (seed {neox_args.seed}, step {iteration}{layer}, trained at {neox_args.seq_length})"
    for path in save_figure(plot_kernel(pe, max_distance, title), args.out):
        print(f"wrote {path}")


if __name__ == "__main__":
    try:
        main()
    except ValueError as e:  # NeoXArgsError, KernelPlotError, checkpoint errors: one paragraph, no traceback
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
