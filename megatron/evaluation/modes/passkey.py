"""`passkey`: retrieval of a 5-digit key hidden at each of `probe-depths` in `probe-samples` prompts of
the evaluated length (megatron/probes/passkey.py); the record as every probe's
(megatron/evaluation/retrieval/record.py)."""
from megatron.probes.passkey import Options, check_lengths, make_grid
from ..retrieval.record import probe_record
from . import register


def check(settings, tokenizer, stream, lengths) -> None:
    options = settings.options(Options)
    check_lengths(stream, tokenizer, lengths, options.probe_depths, options.probe_samples, settings.seed)


@register("passkey", "passkey retrieval at probe-depths (answer log-prob, rank, greedy exact match)", check=check,
          options=Options, splits_sequences=False)
def score(context) -> dict:
    options = context.settings.options(Options)
    return probe_record(context, make_grid(context.stream, context.tokenizer, context.length, options.probe_depths,
                                           options.probe_samples, context.settings.seed))
