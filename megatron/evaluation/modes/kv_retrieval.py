"""`kv-retrieval`: the value of one of `probe-kv-pairs` key-value pairs ` [abc=1234]`, the queried one
at each of `probe-depths`, in `probe-samples` prompts of the evaluated length
(megatron/probes/kv_retrieval.py); the record as every probe's
(megatron/evaluation/retrieval/record.py), its `probe_keys` the queried values."""
from megatron.probes.kv_retrieval import Options, check_lengths, make_grid
from ..retrieval.record import probe_record
from . import register


def check(settings, tokenizer, stream, lengths) -> None:
    options = settings.options(Options)
    check_lengths(stream, tokenizer, lengths, options.probe_depths, options.probe_samples, settings.seed,
                  pairs=options.probe_kv_pairs)


@register("kv-retrieval", "key-value retrieval at probe-depths among probe-kv-pairs pairs (answer log-prob, "
                          "rank, greedy exact match); short enough for 64-token models", check=check,
          options=Options, splits_sequences=False)
def score(context) -> dict:
    options = context.settings.options(Options)
    return probe_record(context, make_grid(context.stream, context.tokenizer, context.length, options.probe_depths,
                                           options.probe_samples, context.settings.seed,
                                           pairs=options.probe_kv_pairs))
