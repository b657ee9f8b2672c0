"""What a forward needs from attention beyond plain causal attention, by name: the vocabulary in which
strategies declare what they handle and require (strategy.py's `can_run`). Each name is one channel of
the positional protocol or one layout of the workload; the phrase after it is how a refusal names it.

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


def needs_of(inputs: AttentionInputs) -> frozenset:
    """The needs of this forward."""
    cpu = inputs.device_type == "cpu"
    flags = {
        "cpu": cpu,
        "score_rewrite": inputs.modifies_scores,
        "whole_matrix": inputs.whole_matrix,
        "query_terms": not inputs.distance_only,
        "token_terms": inputs.token_terms,
        "normaliser": inputs.replaces_softmax,
        "key_transforms": inputs.key_transforms,
        "bias_table": inputs.distance_only and inputs.has_bias,
        "weight": inputs.has_weight,
        "bias_gradient": inputs.learnable_bias,
        "gradients": inputs.needs_grad,
        "cpu_gradients": cpu and inputs.needs_grad,
        "dropout": inputs.dropout_p > 0,
        "scattered_positions": not inputs.consecutive,
        "documents": inputs.documents,
        "window": inputs.windowed,
    }
    return frozenset(need for need, present in flags.items() if present)
