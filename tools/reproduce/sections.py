"""The report's sections beyond Table 3: training speed (Table 4), training curves, learned kernels
(Figures 2-4) and position-wise perplexity (Figure 5)."""
import numpy as np

from megatron.errors import NeoXArgsError
from tools.analysis.training_speed import STEP_TIME_TAG, render_table4, typical_step_seconds
from .inputs import TOKENS_PER_SEC, VALID_LOSS
from .runs import trained_step


def speed_section(sweep, trained, inputs) -> str:
    lines = ["## Table 4: training speed\n", f"_Scale: {sweep.scale}_\n"]
    for dataset in sorted({r.dataset.name for r in trained}):
        speeds = {}
        for run in (r for r in trained if r.dataset.name == dataset):
            seconds = _seconds_per_step(run, inputs)
            if seconds is not None:
                speeds.setdefault(run.label, []).append(seconds)
        if not speeds:
            lines.append(f"**{dataset}**: no speed table: no finished run logged '{STEP_TIME_TAG}' or "
                         f"'{TOKENS_PER_SEC}' at two log intervals or more\n")
            continue
        lines += [f"**{dataset}** (seconds per step on this shared CPU, {sweep.jobs} run(s) at a time, "
                  f"{sweep.threads} thread(s) each; other work on the machine adds noise)\n",
                  render_table4(speeds, with_paper=sweep.data[dataset].paper == "GitHub")]
    return "\n".join(lines)


def _seconds_per_step(run, inputs) -> float | None:
    """tools/analysis/training_speed's rule on the run's step times; for a run whose monitor logged only
    `train/tokens_per_sec`, sec/step = tokens per step / that rate, with the same rule."""
    times = inputs.curve(run, STEP_TIME_TAG)
    if len(times) >= 2:
        return typical_step_seconds(times)
    rates = inputs.curve(run, TOKENS_PER_SEC)
    if len(rates) >= 2:
        args = run.args()
        return args.train_batch_size * args.seq_length / float(np.median([v for _, v in sorted(rates)[1:]]))
    return None


VARIANT_STYLES = (("-", "."), ("--", "s"), (":", "^"), ("-.", "x"))  # (line, marker): the plain run first


def training_section(sweep, trained, inputs, figures) -> str:
    """Validation loss against step: the evidence that the models were trained well enough to compare."""
    from tools.analysis.plot_common import method_color, plt
    datasets = sorted({r.dataset.name for r in trained})
    extended = any(r.extends is not None for r in trained)  # points past the base's last step: legend outside
    fig, axes = plt.subplots(1, len(datasets), figsize=((7.5 if extended else 5.5) * len(datasets), 4), squeeze=False)
    rows = []
    for ax, dataset in zip(axes[0], datasets):
        labels = list(dict.fromkeys(r.label for r in trained))  # a training variant is a method of its own
        for method in labels:
            runs = [r for r in trained if r.dataset.name == dataset and r.label == method]
            curves = [c for c in (_continued(inputs, r) for r in runs) if c]
            if not curves:
                continue
            steps = sorted(set.intersection(*(set(s for s, _ in c) for c in curves)))
            mean = np.array([np.mean([dict(c)[s] for c in curves]) for s in steps])
            # Training variants share their method's colour: told apart by line and marker.
            nth = [m for m in labels if m.pos_emb == method.pos_emb].index(method) % len(VARIANT_STYLES)
            ax.plot(steps, mean, color=method_color(runs[0].label), linestyle=VARIANT_STYLES[nth][0],
                    marker=VARIANT_STYLES[nth][1], label=method)
            quarter = next((i for i, s in enumerate(steps) if s >= 0.75 * steps[-1]), len(steps) - 1)
            rows.append(f"| {dataset} | {method} | {len(curves)} | {mean[-1]:.4f} | {mean[quarter]:.4f} "
                        f"(step {steps[quarter]}) | {100 * (mean[quarter] - mean[-1]) / mean[quarter]:.2f}% |")
        ax.set_xlabel("step")
        ax.set_ylabel("validation loss (nats/token, at the train length)")
        ax.set_title(dataset)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8, **({"loc": "upper left", "bbox_to_anchor": (1.02, 1)} if extended else {}))
    fig.tight_layout()
    figures(fig, "training_curves")
    return "\n".join([
        "## Training: were the models trained enough to compare?\n",
        f"_Scale: {sweep.scale}_\n",
        "Validation loss at the training length (mean over seeds) during training. A method whose loss "
        "still fell steeply at the end would be compared before it converged; the last column is how much "
        "the loss fell over the last quarter of training."
        + (" An extension's steps continue its base run's (its loss is at its own, longer, training length)."
           if extended else "") + "\n",
        "| dataset | method | seeds | final valid loss | valid loss at 75% | fall over the last 25% |",
        "|---|---|---|---|---|---|", *rows, "", "![validation loss during training](training_curves.png)\n"])


def _continued(inputs, run) -> list:
    """`run`'s validation-loss curve [(step, loss)]; an extension's steps counted on from its base run's last
    (a fine-tune starts its own count at 0, but its model has trained through the base's steps first)."""
    curve = inputs.curve(run, VALID_LOSS)
    base = inputs.curve(run.extends, VALID_LOSS) if run.extends is not None and curve else []
    offset = max((step for step, _ in base), default=0)
    return [(step + offset, loss) for step, loss in curve]


def kernel_section(sweep, trained, figures) -> str:
    """Drawn from the first seed's checkpoint; without it (a re-render from a fresh clone) the figure
    already beside the report is kept."""
    from tools.analysis.plot_kernels import KernelPlotError, load_positional_embeddings, plot_kernel
    lines = ["## Figures 2-4: learned kernels\n",
             f"_Scale: {sweep.scale}_\n",
             "The bias b_h(d) each head adds at distance d (first seed), up to the position-wise evaluation "
             "length. The paper (GitHub, 512 tokens) finds KERPLE-log learns several nearly flat kernels, while "
             "power and ALiBi fall steeply.\n"]
    for run in trained:
        if run.method not in sweep.kernel_figures or run.seed != sweep.seeds[0]:
            continue
        stem = f"kernel_{run.dataset.name}_{run.label}"
        args = run.args()
        if trained_step(run) != args.train_iters:
            if (sweep.report_dir / f"{stem}.png").is_file():
                lines.append(f"![{run.label} kernel on {run.dataset.name}]({stem}.png)\n")
            continue
        try:
            modules, step = load_positional_embeddings(args)
        except (KernelPlotError, NeoXArgsError) as err:
            lines.append(f"- {run}: no kernel figure: {err}")
            continue
        max_distance = sweep.position_length or 4 * args.seq_length
        title = (f"{run.dataset.name}: {run.label} kernel" + (f" of layer 1 of {len(modules)}" if len(modules) > 1 else "")
                 + f" (seed {run.seed}, step {step}, trained at {args.seq_length})")
        figures(plot_kernel(modules[0], max_distance, title), stem)
        lines.append(f"![{run.label} kernel on {run.dataset.name}]({stem}.png)\n")
    return "\n".join(lines)


def position_section(sweep, documents, figures) -> str:
    from tools.analysis.plot_position import plot_position_perplexity
    if not sweep.position_length:
        return ""
    L = sweep.position_length
    lines = ["## Figure 5: position-wise perplexity\n", f"_Scale: {sweep.scale}_\n",
             f"Perplexity at each position of the L = {L} chunks (mean over chunks, then seeds; trailing mean "
             "over 16 positions). The windowed run sees at most the training length of context; a method that "
             "uses more keeps falling below it past the training length.\n"]
    for dataset in sorted({d["run"]["dataset"] for d in documents}):
        chosen = [d for d in documents if d["run"]["dataset"] == dataset and
                  (d["run"]["pos_emb"] == sweep.windowed_baseline if d["run"].get("attention_window")
                   else d["run"]["method"] in sweep.position_methods)]
        if not chosen:
            continue
        stem = f"position_{dataset}"
        figures(plot_position_perplexity(chosen, L, dataset, smooth=16), stem)
        lines.append(f"![position-wise perplexity on {dataset}]({stem}.png)\n")
    return "\n".join(lines)
