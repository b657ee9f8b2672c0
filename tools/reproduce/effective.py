"""The report's RULER and effective-length section (a sweep with `ruler:`): per dataset, RULER's score per
task and length (tools/analysis/ruler_table.py) and the effective length of every measure of every method
(tools/analysis/effective_length.py: perplexity, the probes and every RULER task, with bootstrap intervals),
each beside its figure (tools/analysis/plot_ruler.py, plot_effective_length.py)."""
from tools.analysis.effective_length import PPL_FACTOR, THRESHOLD, curves_of, estimates_of, render_table
from tools.analysis.ruler_table import ruler_tables


def effective_section(sweep, inputs, figures) -> str:
    if not sweep.ruler:
        return ""
    from tools.analysis.plot_effective_length import plot_effective_length  # matplotlib: only when drawing
    from tools.analysis.plot_ruler import plot_ruler
    lines = ["## RULER and the effective length of every method\n", f"_Scale: {sweep.scale}_\n",
             f"RULER's {', '.join(sweep.ruler['tasks'])} (lm-eval 0.4.13, made with the run's own tokenizer, "
             f"{sweep.ruler['limit']} samples per length, the same samples for every run) at "
             f"{sweep.evaluation.get('eval_lengths')}; a length too short for any sample of a task says so. "
             f"The effective length: walking up from the training length, the last length before the first whose "
             f"perplexity exceeds {PPL_FACTOR:g}x the training length's, or whose score falls below {THRESHOLD:g}x "
             "its score there (docs/ruler.md).\n"]
    datasets = sorted({d["run"]["dataset"] for d in inputs.documents + inputs.ruler_documents})
    for dataset in datasets:
        documents = [d for d in inputs.documents if d["run"]["dataset"] == dataset]
        ruler = [d for d in inputs.ruler_documents if d["run"]["dataset"] == dataset]
        lines.append(f"### {dataset}\n")
        if ruler:
            figures(plot_ruler(ruler), f"ruler_{dataset}")
            lines += ["```", ruler_tables(ruler, sweep.reference).rstrip(), "```", "",
                      f"![RULER score against length on {dataset}](ruler_{dataset}.png)\n"]
        else:
            lines.append("No RULER results yet (eval.py has not finished on any run of this dataset).\n")
        by_measure = estimates_of(curves_of(documents, ruler))
        lines += ["```", render_table(by_measure, THRESHOLD, PPL_FACTOR), "```", ""]
        if by_measure:
            figures(plot_effective_length(by_measure, THRESHOLD, PPL_FACTOR), f"effective_length_{dataset}")
            lines.append(f"![effective length by method on {dataset}](effective_length_{dataset}.png)\n")
    return "\n".join(lines)
