"""A sweep's training variants beside their parent method, for a sweep that is not an ablation (no
`ablation:` key): each variant against the same method without the variant's keys, at every length, by the
paired tests the report already uses. A description: no rule was written for these, so no verdict."""
import json


from tools.analysis.probe_table import probe_modes
from tools.analysis.results_index import index_results, train_lengths
from .figures import PerplexityStyle, perplexity_figure
from .verdicts import ALPHA, Accuracy, Perplexity, p_text


def variants_section(sweep, documents, figures) -> str:
    if not sweep.training_variants or sweep.ablation:
        return ""
    keys = variant_keys(sweep.training_variants)
    modes = probe_modes(documents)
    lines = ["## Training variants beside their parent method\n", f"_Scale: {sweep.scale}_\n",
             f"Each variant is a run of its own, trained with its method's settings plus its keys ({keys}). Here it "
             "stands beside its parent (the same method without those keys) at every evaluation length, by the "
             f"paired tests of Table 3: perplexity from the loss, paired t-test over seeds, α = {ALPHA}"
             + (" — and of the retrieval section: accuracy, exact McNemar test over (seed, sample) pairs"
                if modes else "")
             + ". *Lower* / *higher*: significantly so; *–*: no significant difference. A description, not a "
             "verdict: the sweep states no rule for these comparisons.\n"]
    trained = train_lengths(documents)
    ppl = index_results(documents, "nonoverlap")
    probes = {mode: index_results(documents, mode) for mode in modes}
    for dataset in sorted(ppl):
        T = trained.get(dataset)
        if T is None:  # runs trained at different lengths: no shared T to pair at
            continue
        data = Perplexity({str(m): v for m, v in ppl[dataset].items()}, T)
        head = "| variant | parent | L | ppl: parent | ppl: variant | p | variant's ppl |"
        rule = "|---|---|---|---|---|---|---|"
        for mode in modes:
            head += f" {mode} accuracy: parent | variant | McNemar p | variant's accuracy |"
            rule += "---|---|---|---|"
        rows = []
        for method, entries in sweep.training_variants.items():
            for label in entries:
                variant = f"{method}+{label}"
                if method not in data.runs or variant not in data.runs:
                    continue
                for L in data.lengths:
                    parent_better, variant_better, p = data.better(method, variant, L)
                    cells = [variant, method, str(L), f"{data.ppl(method, L):.4g}", f"{data.ppl(variant, L):.4g}", p_text(p),
                             _direction(variant_better, parent_better, "lower", "higher")]
                    for mode in modes:
                        runs = {str(m): v for m, v in probes[mode].get(dataset, {}).items()}
                        if L not in runs.get(method, {}) or L not in runs.get(variant, {}):
                            cells += ["", "", "", ""]
                            continue
                        probe = Accuracy(runs, T)
                        parent_acc, variant_acc, p_acc = probe.better(method, variant, L)
                        cells += [f"{probe.accuracy(method, L):.2f}", f"{probe.accuracy(variant, L):.2f}", p_text(p_acc),
                                  _direction(variant_acc, parent_acc, "higher", "lower")]
                    rows.append("| " + " | ".join(cells) + " |")
        if rows:
            lines += [f"**{dataset}** (T = {T}; perplexity and accuracy: mean over seeds)\n", head, rule, *rows, ""]
    return "\n".join(lines)


def variant_keys(training_variants: dict) -> str:
    """`method+label`: the keys it sets, for every training variant of {method: {label: keys}}."""
    return "; ".join(f"`{method}+{label}`: " + ", ".join(f"{k.replace('_', '-')}: {json.dumps(v)}" for k, v in entry.items())
                     for method, entries in training_variants.items() for label, entry in entries.items())


def _direction(variant_better: bool, parent_better: bool, better: str, worse: str) -> str:
    return f"**{better}**" if variant_better else f"**{worse}**" if parent_better else "–"


def variants_figure(documents, sweep):
    """Perplexity against length (top) and its ratio to the training length (bottom), one line per method
    and variant: a variant in its own colour, dashed."""
    return perplexity_figure(documents, PerplexityStyle(
        suptitle=f"{sweep.name}: perplexity by length, training variants dashed (CPU mini scale)",
        bottom_ylabel="ppl(L) / ppl(T), mean over seeds", dashed="+", palette=("tab10", "Dark2"), log_scale=True))
