"""A sweep's training variants beside their parent method, for a sweep that is not an ablation (no
`ablation:` key): each variant against the same method without the variant's keys, at every length, by the
paired tests the report already uses; and its extensions beside their base model's zero-shot result, by the
same tests. A description: no rule was written for these, so no verdict."""
import json


from megatron.evaluation.identity import Method
from tools.analysis.probe_table import probe_modes
from tools.analysis.results_index import index_results
from .figures import PerplexityStyle, perplexity_figure
from .retrieval import plot_method_heatmaps
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
    pairs = [(f"{method}+{label}", method) for method, entries in sweep.training_variants.items() for label in entries]
    return "\n".join(lines + paired_tables(documents, pairs, ("variant", "parent")))


def extensions_section(sweep, documents, figures) -> str:
    """Each extension (a fine-tune of a plain run at a longer context) beside its base model's zero-shot
    result at every evaluation length, by the same paired tests as the training variants; with retrieval
    probes, each base model and its extensions as accuracy heatmaps side by side."""
    if not sweep.extensions:
        return ""
    modes = probe_modes(documents)
    lines = ["## Extensions beside their base model's zero-shot result\n", f"_Scale: {sweep.scale}_\n",
             "Each extension fine-tunes the final checkpoint of its method's plain run (same dataset and seed: "
             "`finetune: true`, a fresh optimizer and schedule) with its keys "
             f"({variant_keys(sweep.extensions)}). Here it stands beside that base model evaluated zero-shot, at "
             "every evaluation length, by the paired tests of Table 3: perplexity from the loss, paired t-test over "
             f"seeds, α = {ALPHA}" + (" — and of the retrieval section: accuracy, exact McNemar test over (seed, "
                                     "sample) pairs" if modes else "")
             + ". *Lower* / *higher*: significantly so; *–*: no significant difference. The extension trained on "
             "more tokens than its base (its own steps on top), so a gain is the extension's, not the method's "
             "zero-shot length generalization. A description, not a verdict.\n"]
    pairs = [(f"{method}+{label}", method) for method, entries in sweep.extensions.items() for label in entries]
    return "\n".join(lines + paired_tables(documents, pairs, ("extension", "base"))
                     + extension_heatmaps(documents, sweep.extensions, figures))


def extension_heatmaps(documents, extensions: dict, figures) -> list[str]:
    """Per dataset and probe: one accuracy panel (length x depth) per base model followed by its extensions,
    each over its own seeds (the retrieval section's panels hold the base models only)."""
    out = []
    for mode in probe_modes(documents):
        index = index_results(documents, mode)
        for dataset in sorted(index):
            runs = {str(m): m for m in index[dataset]}
            order = [label for method, entries in extensions.items()
                     for label in [method, *(f"{method}+{entry}" for entry in entries)] if label in runs]
            if not any("+" in label for label in order):
                continue
            stem = f"extensions_{mode}_{dataset}"
            figures(plot_method_heatmaps(index[dataset], [runs[label] for label in order],
                                         f"{dataset}: {mode}, base models and their extensions"), stem)
            out.append(f"![{mode} accuracy of the base models and their extensions on {dataset}]({stem}.png)\n")
    return out


def paired_tables(documents, pairs, names) -> list[str]:
    """One table per dataset: each (run, parent) pair of labels at every length both were evaluated at, by
    the paired tests of verdicts.py. `names`: what the table calls the two (e.g. "variant", "parent")."""
    this, other = names
    modes = probe_modes(documents)
    trained = _train_lengths(documents)
    ppl = index_results(documents, "nonoverlap")
    probes = {mode: index_results(documents, mode) for mode in modes}
    out = []
    for dataset in sorted(ppl):
        runs_ppl = {str(m): v for m, v in ppl[dataset].items()}
        head = f"| {this} | {other} | L | ppl: {other} | ppl: {this} | p | {this}'s ppl |"
        rule = "|---|---|---|---|---|---|---|"
        for mode in modes:
            head += f" {mode} accuracy: {other} | {this} | McNemar p | {this}'s accuracy |"
            rule += "---|---|---|---|"
        rows, train_at = [], set()
        for run, parent in pairs:
            if parent not in runs_ppl or run not in runs_ppl:
                continue
            # The parent's training length: a pair's measures are read at lengths both were evaluated at.
            data = Perplexity({parent: runs_ppl[parent], run: runs_ppl[run]}, trained[dataset, parent])
            train_at |= {(parent, trained[dataset, parent]), (run, trained[dataset, run])}
            for L in data.lengths:
                if L not in runs_ppl[parent] or L not in runs_ppl[run]:
                    continue
                parent_better, run_better, p = data.better(parent, run, L)
                cells = [run, parent, str(L), f"{data.ppl(parent, L):.4g}", f"{data.ppl(run, L):.4g}", p_text(p),
                         _direction(run_better, parent_better, "lower", "higher")]
                for mode in modes:
                    accuracy = {str(m): v for m, v in probes[mode].get(dataset, {}).items()}
                    if L not in accuracy.get(parent, {}) or L not in accuracy.get(run, {}):
                        cells += ["", "", "", ""]
                        continue
                    probe = Accuracy(accuracy, trained[dataset, parent])
                    parent_acc, run_acc, p_acc = probe.better(parent, run, L)
                    cells += [f"{probe.accuracy(parent, L):.2f}", f"{probe.accuracy(run, L):.2f}", p_text(p_acc),
                              _direction(run_acc, parent_acc, "higher", "lower")]
                rows.append("| " + " | ".join(cells) + " |")
        if rows:
            Ts = sorted({T for _, T in train_at})
            T = f"T = {Ts[0]}" if len(Ts) == 1 else "training lengths: " + ", ".join(
                f"{label} {T}" for label, T in sorted(train_at))
            out += [f"**{dataset}** ({T}; perplexity and accuracy: mean over seeds)\n", head, rule, *rows, ""]
    return out


def _train_lengths(documents) -> dict:
    """{(dataset, label): the training length of that label's runs}."""
    return {(d["run"]["dataset"], str(Method.of_run(d["run"]))): d["run"]["train_length"] for d in documents}


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
        suptitle=f"{sweep.name}: perplexity by length, "
                 + " and ".join(filter(None, ("training variants" if sweep.training_variants else "",
                                              "extensions" if sweep.extensions else ""))) + " dashed (CPU mini scale)",
        bottom_ylabel="ppl(L) / ppl(T), mean over seeds", dashed="+", palette=("tab10", "Dark2"), log_scale=True))
