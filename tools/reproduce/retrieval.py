"""The report's retrieval section (issue 15): probe accuracy per method and length, near and far needles,
heatmaps, and, for a study that judges the paper's claims (`claims:`), claim 4 stated again with retrieval
evidence by a fixed rule (`retrieval_claim`, a pure function of the probe records, unit-tested in
tests/reproduce/test_reproduce_retrieval.py)."""
import numpy as np

from megatron.evaluation.identity import Method
from tools.analysis.paper_numbers import method_name
from tools.analysis.probe_table import correct, paired, paired_p, probe_modes, probe_tables, scored_by
from tools.analysis.results_index import index_results, method_sort_key, train_lengths
from tools.analysis.significance import mcnemar
from .verdicts import ALPHA

CHANCE = 0.05   # "falls to chance": a 4-digit answer is guessed with p = 1e-4; 5% allows a few lucky copies

NEAR_FAR = ("A needle is *far* when every one of its tokens lies at least T (the training length) tokens before the "
            "last prompt token (the record's `probe_distance` >= T), so a model windowed at T cannot see it; *near* "
            "otherwise.")


def claim_rule(reference: str) -> str:
    return (
        f" Claim 4 by retrieval: over the far needles of every length, {method_name(reference)}'s answer NLL is "
        "significantly lower than the windowed run's (paired t-test over (seed, length, sample)) *and* its "
        f"accuracy is significantly higher (exact McNemar test on the same pairs), both at α = {ALPHA}: *confirmed* "
        f"when both hold, *partly confirmed* when one does. The prediction that the windowed run's accuracy falls "
        f"to chance on far needles holds when its far accuracy is at most {CHANCE:.0%}."
    )


def far_mask(T):
    return lambda record: np.array(record["probe_distance"]) >= T


def near_far(by_length: dict, T: int):
    """(near correct, far correct) pooled over lengths and seeds, for {length: {seed: record}}."""
    near, far = [], []
    for by_seed in by_length.values():
        for record in by_seed.values():
            hits, mask = correct(record), far_mask(T)(record)
            near += list(hits[~mask])
            far += list(hits[mask])
    return np.array(near), np.array(far)


def retrieval_claim(reference: str, index: dict, dataset: str, T: int, mode: str):
    """(claim, verdict, evidence) for {dataset: {method: {length: {seed: record}}}} of one probe mode: the claims'
    reference against its run windowed at T."""
    R = method_name(reference)
    claim = f"4. {R} retrieves needles farther than the training length ({mode}), where the windowed run cannot"
    full, windowed = index.get(dataset, {}).get(Method(reference)), index.get(dataset, {}).get(Method(reference, T))
    if not full or not windowed:
        return claim, "not assessed", f"needs {mode} results of {reference} and {reference}{Method('', T)}"
    if any("probe_distance" not in r for by_seed in full.values() for r in by_seed.values()):
        return claim, "not assessed", "the result files lack probe_distance; re-evaluate with this version"
    ref_nll, win_nll, ref_hit, win_hit = [], [], [], []
    for length in sorted(set(full) & set(windowed)):
        a, b = paired(full[length], windowed[length], keep=far_mask(T))
        ref_nll += list(a)
        win_nll += list(b)
        for seed in sorted(set(full[length]) & set(windowed[length])):
            mask = far_mask(T)(full[length][seed])
            ref_hit += list(correct(full[length][seed])[mask])
            win_hit += list(correct(windowed[length][seed])[mask])
    if not ref_nll:
        return claim, "not assessed", f"no needle at least {T} tokens from the question; add longer eval-lengths"
    ref_nll, win_nll, ref_hit, win_hit = map(np.array, (ref_nll, win_nll, ref_hit, win_hit))
    p_nll = paired_p(ref_nll, win_nll)
    p_acc, only_ref, only_win = mcnemar(ref_hit, win_hit)
    lower = p_nll is not None and p_nll < ALPHA and ref_nll.mean() < win_nll.mean()
    higher = p_acc is not None and p_acc < ALPHA and only_ref > only_win
    _, windowed_far = near_far(windowed, T)
    evidence = (f"{len(ref_nll)} far needles: accuracy {R} {ref_hit.mean():.2f} vs windowed "
                f"{win_hit.mean():.2f} (McNemar {_p(p_acc)}); answer NLL {ref_nll.mean():.3f} vs "
                f"{win_nll.mean():.3f} (paired t, {_p(p_nll)}). Windowed far accuracy {windowed_far.mean():.2f}: "
                f"the falls-to-chance prediction {'holds' if windowed_far.mean() <= CHANCE else 'fails'}")
    verdict = "confirmed" if lower and higher else "partly confirmed" if lower or higher else "not confirmed"
    return claim, verdict, evidence


def _p(p) -> str:
    return f"p = {p:.3g}" if p is not None else "no test"


def retrieval_section(sweep, documents, figures) -> str:
    modes = probe_modes(documents)
    if not modes:
        return ""
    lines = ["## Retrieval probes: does a skill learned at the training length carry to 32x?\n", f"_Scale: {sweep.scale}_\n",
             "Synthetic prompts made from eval-seed alone (byte-identical for every run) with filler from the "
             "evaluation split; the models were trained with the same task mixed into training, at the "
             f"training length only ({_mix(sweep.overrides)}). Evaluation-only variants (e.g. RoPE scaling) "
             "re-score the plain checkpoints. " + NEAR_FAR
             + (claim_rule(sweep.claims["reference"]) if sweep.claims else "") + "\n"]
    for mode in modes:
        index = index_results(documents, mode)
        lines.append(probe_tables(documents, mode, sweep.reference, ALPHA))
        for dataset in sorted(index):
            T = train_lengths(documents)[dataset]
            if T is None:
                lines.append(f"**{dataset}, `{mode}`**: no near/far split: its runs were trained at different lengths\n")
                continue
            methods = sorted(index[dataset], key=method_sort_key)
            rows = ["| method | near accuracy | far accuracy | far needles |", "|---|---|---|---|"]
            for method in methods:
                near, far = (near_far(index[dataset][method], T)
                             if all("probe_distance" in r for s in index[dataset][method].values() for r in s.values())
                             else (np.array([]), np.array([])))
                rows.append(f"| {method} | {_mean(near)} | {_mean(far)} | {len(far)} |")
            stem = f"{mode}_{dataset}"
            figures(plot_method_heatmaps(index[dataset], methods, f"{dataset}: {mode}"), stem)
            lines += [f"**{dataset}, `{mode}`: near and far needles** (T = {T}; pooled over lengths, "
                      "depths, samples and seeds)\n", *rows, ""]
            if sweep.claims:
                claim, verdict, evidence = retrieval_claim(sweep.claims["reference"], index, dataset, T, mode)
                lines += ["| claim | verdict | numbers |", "|---|---|---|",
                          f"| {claim} | **{verdict}** | {evidence} |", ""]
            lines.append(f"![{mode} accuracy by length and depth on {dataset}]({stem}.png)\n")
    return "\n".join(lines)


def _mix(overrides: dict) -> str:
    keys = {k.replace("_", "-"): v for k, v in overrides.items() if k.startswith("probe_train_")}  # normalised keys
    return ", ".join(f"`{k}: {v}`" for k, v in sorted(keys.items())) or "no `probe-train-*` key in the sweep's `set`"


def _mean(values) -> str:
    return f"{values.mean():.2f}" if len(values) else ""


def plot_method_heatmaps(by_method: dict, methods: list, title: str):
    """One panel per method: accuracy over (length x depth), mean over seeds."""
    from tools.analysis.plot_common import plt
    from tools.analysis.plot_probe import draw_panel
    columns = min(len(methods), 6)
    rows = -(-len(methods) // columns)
    fig, axes = plt.subplots(rows, columns, figsize=(2.4 * columns + 1.2, 2.9 * rows + 0.6), squeeze=False)
    # Room for the rotated length labels above the next row's titles; depth labels on the left column only.
    fig.subplots_adjust(left=0.06, right=0.86, top=0.9, bottom=0.1, wspace=0.12, hspace=0.55)
    image = None
    seed_counts = {len(by_method[m][min(by_method[m])]) for m in methods}  # seeds at the shortest length
    for ax, method in zip(axes.flat, methods):
        by_length = by_method[method]
        lengths = sorted(by_length)
        first = next(iter(by_length[lengths[0]].values()))
        depths, samples = first["probe_depths"], first["probe_samples"]
        grid = np.array([[np.mean([correct(r)[i * samples:(i + 1) * samples].mean() for r in by_length[L].values()])
                          for i in range(len(depths))] for L in lengths])
        seeds = f" ({len(by_length[lengths[0]])} seeds)" if len(seed_counts) > 1 else ""  # else said once, above
        image = draw_panel(ax, lengths, depths, grid, f"{method}{seeds}", fontsize=5)
    for ax in list(axes.flat)[len(methods):]:
        ax.axis("off")
    for ax in axes[:, 1:].flat:
        ax.tick_params(labelleft=False)
    for ax in axes[:, 0]:
        ax.set_ylabel("needle depth", fontsize=8)
    for ax in axes[-1]:
        ax.set_xlabel("evaluation length", fontsize=8)
    records = [r for m in methods for s in by_method[m].values() for r in s.values()]
    each = f", {next(iter(seed_counts))} seeds each" if len(seed_counts) == 1 else ""
    fig.suptitle(f"{title}: {scored_by(records)}{each}", x=0.46, fontsize=9)  # over the panels, not the colour bar
    fig.colorbar(image, ax=axes.ravel().tolist(), label="accuracy", shrink=0.8)
    return fig
