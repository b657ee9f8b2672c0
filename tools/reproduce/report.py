"""The report: report.md with Tables 3-5, the claims' verdicts, and the figures, written from the
report's inputs (inputs.py) so that a fresh clone re-renders it (`--report-only`)."""
import dataclasses
import datetime
import os
import platform

from megatron.evaluation.results import ResultFileError
from .ablation_report import ablation_section
from .claims import claims_section
from .effective import effective_section
from .execute import git_commit
from .inputs import ReportInputs
from .runs import Run
from .retrieval import retrieval_section
from .sections import kernel_section, position_section, speed_section, training_section
from .variants import extensions_section, variants_figure, variants_section
from .spec import Sweep, SweepError

COMPLEX_KERNELS = ("kerple_log3", "kerple_bias_weight")  # the paper's Table 5


def write_report(sweep: Sweep, runs: list[Run], inputs: ReportInputs, failures: dict, command: str,
                 rerendered: bool = False):
    from tools.analysis.make_tables import build_table3, render_csv, render_markdown
    from tools.analysis.plot_common import save_figure
    from tools.analysis.plot_lengths import plot_perplexity_vs_length

    everything = inputs.documents
    # Extensions (trained at another length) have a section of their own and a line in the figure; Table 3,
    # the claims and the other studies compare the models as trained, zero-shot.
    documents = [d for d in everything if not d["run"].get("extension")]
    if not everything:
        raise SweepError(f"no finished runs of this sweep (as configured now) under {sweep.work_dir} to report "
                         "on; run the sweep first")
    out = sweep.report_dir
    out.mkdir(parents=True, exist_ok=True)
    paper_map = {d.name: d.paper for d in sweep.data.values() if d.paper}
    reference = sweep.reference
    # The report shows PNGs only: a PDF beside each would be drawn (a fifth of a re-render's CPU) only to be deleted.
    figures = lambda fig, stem: save_figure(fig, out / stem, suffixes=(".png",))  # noqa: E731

    try:
        base_docs = [d for d in documents
                     if d["run"]["pos_emb"] not in COMPLEX_KERNELS or d["run"]["pos_emb"] == reference]
        table3 = build_table3(base_docs, "nonoverlap", reference, 0.05, paper_map)
        (out / "table3.csv").write_text(render_csv(table3))
        if not sweep.training_variants and not sweep.extensions:  # plot_lengths colours by pos-emb: variants
            figures(plot_perplexity_vs_length(documents), "ppl_vs_length")  # need a colour of their own
        elif not sweep.ablation:  # the ablation draws its own figure (with DAPE-V2's curve)
            figures(variants_figure(everything, sweep), "ppl_vs_length")
        complex_docs = [d for d in documents if d["run"]["pos_emb"] in COMPLEX_KERNELS + (reference,)
                        and not d["run"].get("attention_window")]
        table5 = (build_table3(complex_docs, "nonoverlap", reference, 0.05, {})
                  if any(m in COMPLEX_KERNELS for m in sweep.methods) and complex_docs else None)
    except ResultFileError as err:
        raise SweepError(f"cannot write the report: {err}") from None

    trained = [r for r in runs if not r.base]
    sections = [_header(sweep, runs, inputs, command, rerendered), ablation_section(sweep, documents, figures),
                variants_section(sweep, documents, figures), extensions_section(sweep, everything, figures),
                claims_section(sweep, table3, documents),
                "## Table 3: perplexity by evaluation length\n", f"_Scale: {sweep.scale}_\n", render_markdown(table3),
                "![perplexity versus length](ablation_ppl.png)\n" if sweep.ablation else
                "![perplexity versus length](ppl_vs_length.png)\n"]
    if table5:
        sections += ["## Table 5: the complex kernels\n", f"_Scale: {sweep.scale}_\n", render_markdown(table5)]
    sections += [speed_section(sweep, trained, inputs), training_section(sweep, trained, inputs, figures),
                 kernel_section(sweep, trained, figures), position_section(sweep, documents, figures),
                 retrieval_section(sweep, documents, figures), effective_section(sweep, inputs, figures),
                 _status_section(runs, everything, failures)]
    if sweep.commentary and sweep.commentary.is_file():
        sections.append(sweep.commentary.read_text())
    report = out / "report.md"
    temporary = report.with_suffix(".md.tmp")
    temporary.write_text("\n".join(s.rstrip() + "\n" for s in sections if s))
    os.replace(temporary, report)
    return report


def _header(sweep, runs, inputs, command, rerendered) -> str:
    commit, dirty = git_commit(sweep.report_dir)
    args = runs[0].args()
    evaluation = sweep.evaluation
    datasets = sorted({d["run"]["dataset"] for d in inputs.documents})
    trained_at = inputs.trained_commits
    # A study that judges the KERPLE paper's claims is its reproduction; another study is titled by its name
    # alone, and speaks of the paper's numbers only where a dataset names the paper's (`paper:`).
    paper = sweep.claims or any(d.paper for d in sweep.data.values())
    lines = [
        f"# KERPLE reproduction: `{sweep.name}`\n" if sweep.claims else f"# Study: `{sweep.name}`\n",
        f"**Scale: {sweep.scale}**" + (" These are this reproduction's numbers; wherever the paper's numbers "
                                       "appear they sit in columns labelled *paper* and come from the KERPLE paper "
                                       "(162M model, 512 tokens, Pile subsets), not from this run." if paper else "")
        + "\n",
        f"- Command: `{command}`" + (" (this file was re-rendered from the inputs beside it with `--report-only`)"
                                     if rerendered else ""),
        f"- Commit: `{commit}`" + (" (with uncommitted changes to tracked files)" if dirty else "")
        + (f"; runs trained at {', '.join(trained_at)}" if trained_at else ""),
        f"- Generated: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC on "
        f"{platform.machine()} / {os.cpu_count()} CPU cores, Python {platform.python_version()}",
        f"- Sweep: `{sweep.path}`; profile {', '.join(f'`{p}`' for p in sweep.profile)}; inputs beside this "
        "report in `inputs/`",
        f"- Model: {args.num_layers} layers, hidden {args.hidden_size}, {args.num_attention_heads} heads, "
        f"{_parameter_count(runs[0], sweep.reference):,} parameters ({sweep.reference}), {args.precision}",
        f"- Training: {args.train_iters:,} steps x {args.train_batch_size} sequences x {args.seq_length} tokens "
        f"= {args.train_iters * args.train_batch_size * args.seq_length:,} tokens per run; lr {args.lr:g} "
        f"({args.lr_decay_style}, warmup {args.warmup:g}); seeds {', '.join(map(str, sweep.seeds))}",
        f"- Evaluation: non-overlapping chunks of L tokens, lengths {evaluation.get('eval_lengths')}, "
        f"{evaluation.get('eval_chunks') or 'all'} chunks per length from the `{evaluation.get('eval_split', 'test')}` "
        "split, the same chunks for every model and seed",
        "- Datasets: " + "; ".join(_dataset_line(sweep.data[name], inputs) for name in datasets if name in sweep.data),
        f"- Methods: {', '.join(sweep.methods)}"
        + (f"; windowed baseline: {sweep.windowed_baseline} evaluated with attention-window = {args.seq_length} "
           "(training at that length masks nothing, so its checkpoint is the unwindowed run's)"
           if sweep.windowed_baseline else "")
        + (f"; trained variants: {', '.join(sorted({str(r.label) for r in runs if r.trained}))}"
           if sweep.training_variants else "")
        + (f"; extensions (fine-tunes of the plain runs): {', '.join(sorted({str(r.label) for r in runs if r.extension}))}"
           if sweep.extensions else "")
        + (f"; evaluation-only variants of the trained checkpoints: "
           f"{', '.join(sorted({str(r.label) for r in runs if r.variant}))}" if sweep.variants else ""),
        "",
    ]
    return "\n".join(lines)


def _dataset_line(dataset, inputs) -> str:
    paper = f", stand-in for the paper's {dataset.paper}" if dataset.paper else ""
    tokens = inputs.dataset_tokens.get(dataset.name, 0)
    return f"`{dataset.name}` ({tokens:,} tokens, {dataset.tokenizer.get('tokenizer-type')}{paper})"


def _parameter_count(run: Run, method: str) -> int:
    from megatron.model import GPTModel
    from megatron.tokenizer import build_tokenizer
    args = run.args({**run.training_overrides(), "pos_emb": method})
    model = dataclasses.replace(args.model, padded_vocab_size=build_tokenizer(args.tokenizer_run()).padded_vocab_size)
    return sum(p.numel() for p in GPTModel(model).parameters())


def _status_section(runs, documents, failures) -> str:
    finished = {(d["run"]["dataset"], d["run"]["method"], d["run"]["seed"]) for d in documents}
    missing = [str(r) for r in runs if (r.dataset.name, r.label, r.seed) not in finished]
    lines = ["## Runs\n", f"{len(documents)} of {len(runs)} planned runs have results."]
    if missing:
        lines.append("Missing (not run yet, or failed): " + ", ".join(missing) + ".")
    for run, error in failures.items():
        lines.append(f"- **failed** {run}: {error.splitlines()[0]}")
    return "\n".join(lines) + "\n"
