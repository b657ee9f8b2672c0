"""Other papers' perplexities of a method, typed in as data and keyed by the method (pos-emb) an ablation
studies: an ablation of that method sets them beside its own (ablation_report.py), always labelled as
theirs; an ablation of a method with no entry here shows its own numbers alone. Their scales are not this
project's, so only the shape of a curve is compared: ppl(L) / ppl(T), T their training length.

A method's first report is the one its ablation asks about: rule 1's "degrades" is that report's pattern,
and the figures draw its curve."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class Report:
    name: str           # the paper, as the report's text names it
    source: str         # what they trained, how, and on what: printed beside their numbers
    train_length: int   # their T
    ppl: dict           # {our method: (their name for it, {L / T: perplexity})}
    model: str          # their model, for the sentence under the table ("125M")
    tokenizer: str      # their tokenizer, likewise
    chunks: int = 0     # how many chunks (batches) they evaluated at each length
    label: str = ""     # the first report's curve in the figures
    scale: str = ""     # "at 125M / 512 tokens": the figures' titles
    # Our plain run of the method, as the rules (short) and the section (long) set it against their setup.
    plain: str = ""
    plain_long: str = ""


THEIRS = {
    "kerple_log": (
        # DAPE-V2 (Zheng et al., ACL 2025), KERPLE row: a different scale from ours.
        Report("DAPE-V2", "DAPE-V2 (ACL 2025), KERPLE-log: 125M model, trained at 512 tokens on ArXiv, their GPT-NeoX "
               "fork with per-layer KERPLE parameters, fp16 training, 20 evaluation batches", 512,
               {"kerple_log": ("KERPLE-log", {1: 4.57, 2: 4.37, 4: 5.09, 8: 6.80, 16: 9.08})}, "125M", "GPT-2 BPE",
               chunks=20, label="DAPE-V2 KERPLE-log (theirs: 125M, ArXiv, T=512)", scale="at 125M / 512 tokens",
               plain="with shared parameters in fp32",
               plain_long="as the paper trains it (one set of kernel parameters shared by the layers, fp32)"),
        # A second, independent report of KERPLE degrading (arXiv 2503.08067, CABLE, Table 2's reproduction):
        # its ladder is not powers of two.
        Report("CABLE", "CABLE (arXiv 2503.08067), their own reproduction: GPT-2 Medium, trained at 1,024 tokens on "
               "FineWeb-Edu", 1024,
               {"kerple_log": ("KERPLE", {1: 16.70, 4: 16.78, 8: 20.32, 15: 26.13}),
                "alibi": ("ALiBi", {1: 16.79, 15: 17.46})}, "GPT-2 Medium", "GPT-2 BPE"),
    ),
}


def reports(method: str) -> tuple:
    return THEIRS.get(method, ())
