"""What a forward needs from attention beyond plain causal attention, by name: the vocabulary in which
strategies declare what they handle and require (strategy.py's `can_run`), and in which a positional
method names its channels (base.py's CHANNELS, a method's `channels`). Each name is one channel or one
layout of the run; the phrase after it is how a refusal names it.

The order is the order in which `can_run` looks: the first need that refuses a strategy gives its reason."""
from megatron.model.attention.inputs import AttentionInputs

NEEDS = {
    # the device the strategy's kernel runs on
    "cpu": "a CPU device (it calls torch's CPU flash kernel directly)",
    # channels of the positional protocol
    "score_rewrite": "a method that rewrites the whole score matrix (pe.modify_scores: cope, dape)",
    "whole_matrix": "a score rewrite whose rows read past their own keys, so only the forward's whole matrix at "
                    "once gives its numbers (pe.reads_whole_matrix: dape's authors' V2)",
    "query_terms": "terms that depend on the query position itself, not on i - j alone (pe.pairwise)",
    "token_terms": "per-token terms F_i - F_j (pe.token_terms: fox's forget gate)",
    "normaliser": "a method that replaces the softmax (pe.normalise: stickbreaking)",
    "key_transforms": "Householder transforms of the keys by the tokens in between (pe.key_transforms: path)",
    "channel_decays": "per-channel decays of the dot products by the tokens in between (pe.channel_decays: wall)",
    "sink": "a learnable attention sink (attention-sink), which rescales each row by its log-sum-exp",
    "sink_off_cpu": "a learnable attention sink off the CPU, where SDPA's fused kernels return no log-sum-exp for it",
    "bias_table": "a per-distance bias table",
    "weight": "a weight that multiplies the scores",
    "bias_gradient": "a learnable bias's gradient",
    # the workload
    "gradients": "a forward that needs gradients",
    "cpu_gradients": "gradients on CPU",
    "dropout": "attention dropout",
    "scattered_positions": "positions that are not consecutive (a term is then not a function of the index difference)",
    "documents": "packed documents masked per row (reset-attention-mask)",
    "window": "an attention window",
}
EVERY_NEED = frozenset(NEEDS)
# Channels every strategy applies in the plan they share (strategy.py's `rotate`: q times the query scale), so
# none refuses them: they have no phrase.
EVERY_STRATEGY = frozenset({"query_scale"})


def needs_of(inputs: AttentionInputs) -> frozenset:
    """The needs of this forward: the method's channels, and the run's layouts."""
    run = inputs.run
    cpu = run.device_type == "cpu"
    layouts = {
        "cpu": cpu,
        "gradients": run.needs_grad,
        "cpu_gradients": cpu and run.needs_grad,
        "sink_off_cpu": not cpu and "sink" in inputs.channels,
        "dropout": run.dropout_p > 0,
        "scattered_positions": not run.consecutive,
        "documents": run.documents,
        "window": run.windowed,
    }
    return (inputs.channels - EVERY_STRATEGY) | {need for need, present in layouts.items() if present}
