"""`auto`'s decisions, strategy by strategy, against a table written out as data.

The table is the rule `auto` followed before attention strategies became classes (issue 25): the old
`choose_path` and plan_attention's choice of mask, Toeplitz row or table gradient, evaluated for every
combination below and written out here, so the classes' `can_run` / `memory_bytes` and
megatron/model/attention/choice.py's preferences must reproduce it exactly. The methods are real ones, one per kind:
none (no terms), alibi (a fixed distance bias), kerple_log (a learnable distance bias),
kerple_bias_weight (a bias with a weight), fire (terms that depend on the query position itself).
Since issue 27 kerple_bias_weight on CPU reads strided rows where it gathered blocks: without gradients
(toeplitz_written_out), and with them (toeplitz_weighted_table_gradient) where `sdpa` wrote out the softmax.
A learnable distance table in training on CUDA (kerple_log, kerple_bias_weight) takes the `triton` kernel
(choice.py's TRITON_FOR_LEARNABLE_TABLES_ON_CUDA), except with dropout, which it does not apply."""

import pytest
import torch

from megatron.model.attention import AttentionInputs
from megatron.model.attention.registry import PATH_STRATEGIES, STRATEGIES
from megatron.model.attention.choice import choose_strategy
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.model.positional_embeddings.dape import daped
from megatron.neox_arguments import NeoXArgsError

# kind               device grad dropout window fits strategy   ("fits": the `sdpa` estimate fits the budget)
EXPECTED = """
none                cpu   no   0.0     no     yes  sdpa
none                cpu   no   0.0     no     no   sdpa
none                cpu   no   0.0     yes    yes  toeplitz
none                cpu   no   0.0     yes    no   toeplitz
none                cpu   no   0.1     no     yes  sdpa
none                cpu   no   0.1     no     no   sdpa
none                cpu   no   0.1     yes    yes  sdpa
none                cpu   no   0.1     yes    no   blocked
none                cpu   yes  0.0     no     yes  sdpa
none                cpu   yes  0.0     no     no   sdpa
none                cpu   yes  0.0     yes    yes  toeplitz
none                cpu   yes  0.0     yes    no   toeplitz
none                cpu   yes  0.1     no     yes  sdpa
none                cpu   yes  0.1     no     no   sdpa
none                cpu   yes  0.1     yes    yes  sdpa
none                cpu   yes  0.1     yes    no   blocked
none                cuda  no   0.0     no     yes  sdpa
none                cuda  no   0.0     no     no   sdpa
none                cuda  no   0.0     yes    yes  sdpa
none                cuda  no   0.0     yes    no   flex
none                cuda  no   0.1     no     yes  sdpa
none                cuda  no   0.1     no     no   sdpa
none                cuda  no   0.1     yes    yes  sdpa
none                cuda  no   0.1     yes    no   blocked
none                cuda  yes  0.0     no     yes  sdpa
none                cuda  yes  0.0     no     no   sdpa
none                cuda  yes  0.0     yes    yes  sdpa
none                cuda  yes  0.0     yes    no   flex
none                cuda  yes  0.1     no     yes  sdpa
none                cuda  yes  0.1     no     no   sdpa
none                cuda  yes  0.1     yes    yes  sdpa
none                cuda  yes  0.1     yes    no   blocked
alibi               cpu   no   0.0     no     yes  toeplitz
alibi               cpu   no   0.0     no     no   toeplitz
alibi               cpu   no   0.0     yes    yes  toeplitz
alibi               cpu   no   0.0     yes    no   toeplitz
alibi               cpu   no   0.1     no     yes  sdpa
alibi               cpu   no   0.1     no     no   blocked
alibi               cpu   no   0.1     yes    yes  sdpa
alibi               cpu   no   0.1     yes    no   blocked
alibi               cpu   yes  0.0     no     yes  toeplitz
alibi               cpu   yes  0.0     no     no   toeplitz
alibi               cpu   yes  0.0     yes    yes  toeplitz
alibi               cpu   yes  0.0     yes    no   toeplitz
alibi               cpu   yes  0.1     no     yes  sdpa
alibi               cpu   yes  0.1     no     no   blocked
alibi               cpu   yes  0.1     yes    yes  sdpa
alibi               cpu   yes  0.1     yes    no   blocked
alibi               cuda  no   0.0     no     yes  sdpa
alibi               cuda  no   0.0     no     no   flex
alibi               cuda  no   0.0     yes    yes  sdpa
alibi               cuda  no   0.0     yes    no   flex
alibi               cuda  no   0.1     no     yes  sdpa
alibi               cuda  no   0.1     no     no   blocked
alibi               cuda  no   0.1     yes    yes  sdpa
alibi               cuda  no   0.1     yes    no   blocked
alibi               cuda  yes  0.0     no     yes  sdpa
alibi               cuda  yes  0.0     no     no   flex
alibi               cuda  yes  0.0     yes    yes  sdpa
alibi               cuda  yes  0.0     yes    no   flex
alibi               cuda  yes  0.1     no     yes  sdpa
alibi               cuda  yes  0.1     no     no   blocked
alibi               cuda  yes  0.1     yes    yes  sdpa
alibi               cuda  yes  0.1     yes    no   blocked
kerple_log          cpu   no   0.0     no     yes  toeplitz
kerple_log          cpu   no   0.0     no     no   toeplitz
kerple_log          cpu   no   0.0     yes    yes  toeplitz
kerple_log          cpu   no   0.0     yes    no   toeplitz
kerple_log          cpu   no   0.1     no     yes  sdpa
kerple_log          cpu   no   0.1     no     no   blocked
kerple_log          cpu   no   0.1     yes    yes  sdpa
kerple_log          cpu   no   0.1     yes    no   blocked
kerple_log          cpu   yes  0.0     no     yes  toeplitz_table_gradient
kerple_log          cpu   yes  0.0     no     no   toeplitz_table_gradient
kerple_log          cpu   yes  0.0     yes    yes  toeplitz_table_gradient
kerple_log          cpu   yes  0.0     yes    no   toeplitz_table_gradient
kerple_log          cpu   yes  0.1     no     yes  sdpa
kerple_log          cpu   yes  0.1     no     no   blocked
kerple_log          cpu   yes  0.1     yes    yes  sdpa
kerple_log          cpu   yes  0.1     yes    no   blocked
kerple_log          cuda  no   0.0     no     yes  sdpa
kerple_log          cuda  no   0.0     no     no   flex
kerple_log          cuda  no   0.0     yes    yes  sdpa
kerple_log          cuda  no   0.0     yes    no   flex
kerple_log          cuda  no   0.1     no     yes  sdpa
kerple_log          cuda  no   0.1     no     no   blocked
kerple_log          cuda  no   0.1     yes    yes  sdpa
kerple_log          cuda  no   0.1     yes    no   blocked
kerple_log          cuda  yes  0.0     no     yes  triton
kerple_log          cuda  yes  0.0     no     no   triton
kerple_log          cuda  yes  0.0     yes    yes  triton
kerple_log          cuda  yes  0.0     yes    no   triton
kerple_log          cuda  yes  0.1     no     yes  sdpa
kerple_log          cuda  yes  0.1     no     no   blocked
kerple_log          cuda  yes  0.1     yes    yes  sdpa
kerple_log          cuda  yes  0.1     yes    no   blocked
kerple_bias_weight  cpu   no   0.0     no     yes  toeplitz_written_out
kerple_bias_weight  cpu   no   0.0     no     no   toeplitz_written_out
kerple_bias_weight  cpu   no   0.0     yes    yes  toeplitz_written_out
kerple_bias_weight  cpu   no   0.0     yes    no   toeplitz_written_out
kerple_bias_weight  cpu   no   0.1     no     yes  sdpa_written_out
kerple_bias_weight  cpu   no   0.1     no     no   blocked
kerple_bias_weight  cpu   no   0.1     yes    yes  sdpa_written_out
kerple_bias_weight  cpu   no   0.1     yes    no   blocked
kerple_bias_weight  cpu   yes  0.0     no     yes  toeplitz_weighted_table_gradient
kerple_bias_weight  cpu   yes  0.0     no     no   toeplitz_weighted_table_gradient
kerple_bias_weight  cpu   yes  0.0     yes    yes  toeplitz_weighted_table_gradient
kerple_bias_weight  cpu   yes  0.0     yes    no   toeplitz_weighted_table_gradient
kerple_bias_weight  cpu   yes  0.1     no     yes  sdpa_written_out
kerple_bias_weight  cpu   yes  0.1     no     no   blocked
kerple_bias_weight  cpu   yes  0.1     yes    yes  sdpa_written_out
kerple_bias_weight  cpu   yes  0.1     yes    no   blocked
kerple_bias_weight  cuda  no   0.0     no     yes  sdpa_written_out
kerple_bias_weight  cuda  no   0.0     no     no   flex
kerple_bias_weight  cuda  no   0.0     yes    yes  sdpa_written_out
kerple_bias_weight  cuda  no   0.0     yes    no   flex
kerple_bias_weight  cuda  no   0.1     no     yes  sdpa_written_out
kerple_bias_weight  cuda  no   0.1     no     no   blocked
kerple_bias_weight  cuda  no   0.1     yes    yes  sdpa_written_out
kerple_bias_weight  cuda  no   0.1     yes    no   blocked
kerple_bias_weight  cuda  yes  0.0     no     yes  triton
kerple_bias_weight  cuda  yes  0.0     no     no   triton
kerple_bias_weight  cuda  yes  0.0     yes    yes  triton
kerple_bias_weight  cuda  yes  0.0     yes    no   triton
kerple_bias_weight  cuda  yes  0.1     no     yes  sdpa_written_out
kerple_bias_weight  cuda  yes  0.1     no     no   blocked
kerple_bias_weight  cuda  yes  0.1     yes    yes  sdpa_written_out
kerple_bias_weight  cuda  yes  0.1     yes    no   blocked
fire                cpu   no   0.0     no     yes  sdpa
fire                cpu   no   0.0     no     no   blocked
fire                cpu   no   0.0     yes    yes  sdpa
fire                cpu   no   0.0     yes    no   blocked
fire                cpu   no   0.1     no     yes  sdpa
fire                cpu   no   0.1     no     no   blocked
fire                cpu   no   0.1     yes    yes  sdpa
fire                cpu   no   0.1     yes    no   blocked
fire                cpu   yes  0.0     no     yes  sdpa
fire                cpu   yes  0.0     no     no   blocked
fire                cpu   yes  0.0     yes    yes  sdpa
fire                cpu   yes  0.0     yes    no   blocked
fire                cpu   yes  0.1     no     yes  sdpa
fire                cpu   yes  0.1     no     no   blocked
fire                cpu   yes  0.1     yes    yes  sdpa
fire                cpu   yes  0.1     yes    no   blocked
fire                cuda  no   0.0     no     yes  sdpa
fire                cuda  no   0.0     no     no   blocked
fire                cuda  no   0.0     yes    yes  sdpa
fire                cuda  no   0.0     yes    no   blocked
fire                cuda  no   0.1     no     yes  sdpa
fire                cuda  no   0.1     no     no   blocked
fire                cuda  no   0.1     yes    yes  sdpa
fire                cuda  no   0.1     yes    no   blocked
fire                cuda  yes  0.0     no     yes  sdpa
fire                cuda  yes  0.0     no     no   blocked
fire                cuda  yes  0.0     yes    yes  sdpa
fire                cuda  yes  0.0     yes    no   blocked
fire                cuda  yes  0.1     no     yes  sdpa
fire                cuda  yes  0.1     no     no   blocked
fire                cuda  yes  0.1     yes    yes  sdpa
fire                cuda  yes  0.1     yes    no   blocked
"""
# The channels that entered `auto` after the table above: per-token terms (fox), score rewrites (cope; dape
# over alibi) and packed documents masked (reset-attention-mask, `+documents`). Written out from the rule as
# it stood when attention moved into one folder (issue 41), so any later change of a decision shows here.
# "refused": a method that rewrites the scores, over the budget, gets choice.py's one-paragraph refusal.
EXPECTED_CHANNELS = """
fox                  cpu   no   0.0     no     yes  blocked_token_terms
fox                  cpu   no   0.0     no     no   blocked_token_terms
fox                  cpu   no   0.0     yes    yes  blocked_token_terms
fox                  cpu   no   0.0     yes    no   blocked_token_terms
fox                  cpu   no   0.1     no     yes  sdpa
fox                  cpu   no   0.1     no     no   blocked
fox                  cpu   no   0.1     yes    yes  sdpa
fox                  cpu   no   0.1     yes    no   blocked
fox                  cpu   yes  0.0     no     yes  blocked_token_terms
fox                  cpu   yes  0.0     no     no   blocked_token_terms
fox                  cpu   yes  0.0     yes    yes  blocked_token_terms
fox                  cpu   yes  0.0     yes    no   blocked_token_terms
fox                  cpu   yes  0.1     no     yes  sdpa
fox                  cpu   yes  0.1     no     no   blocked
fox                  cpu   yes  0.1     yes    yes  sdpa
fox                  cpu   yes  0.1     yes    no   blocked
fox                  cuda  no   0.0     no     yes  sdpa
fox                  cuda  no   0.0     no     no   flex
fox                  cuda  no   0.0     yes    yes  sdpa
fox                  cuda  no   0.0     yes    no   flex
fox                  cuda  no   0.1     no     yes  sdpa
fox                  cuda  no   0.1     no     no   blocked
fox                  cuda  no   0.1     yes    yes  sdpa
fox                  cuda  no   0.1     yes    no   blocked
fox                  cuda  yes  0.0     no     yes  sdpa
fox                  cuda  yes  0.0     no     no   flex
fox                  cuda  yes  0.0     yes    yes  sdpa
fox                  cuda  yes  0.0     yes    no   flex
fox                  cuda  yes  0.1     no     yes  sdpa
fox                  cuda  yes  0.1     no     no   blocked
fox                  cuda  yes  0.1     yes    yes  sdpa
fox                  cuda  yes  0.1     yes    no   blocked
cope                 cpu   no   0.0     no     yes  blocked
cope                 cpu   no   0.0     no     no   refused
cope                 cpu   no   0.0     yes    yes  blocked
cope                 cpu   no   0.0     yes    no   refused
cope                 cpu   no   0.1     no     yes  blocked
cope                 cpu   no   0.1     no     no   refused
cope                 cpu   no   0.1     yes    yes  blocked
cope                 cpu   no   0.1     yes    no   refused
cope                 cpu   yes  0.0     no     yes  sdpa_written_out
cope                 cpu   yes  0.0     no     no   refused
cope                 cpu   yes  0.0     yes    yes  sdpa_written_out
cope                 cpu   yes  0.0     yes    no   refused
cope                 cpu   yes  0.1     no     yes  sdpa_written_out
cope                 cpu   yes  0.1     no     no   refused
cope                 cpu   yes  0.1     yes    yes  sdpa_written_out
cope                 cpu   yes  0.1     yes    no   refused
cope                 cuda  no   0.0     no     yes  sdpa_written_out
cope                 cuda  no   0.0     no     no   refused
cope                 cuda  no   0.0     yes    yes  sdpa_written_out
cope                 cuda  no   0.0     yes    no   refused
cope                 cuda  no   0.1     no     yes  sdpa_written_out
cope                 cuda  no   0.1     no     no   refused
cope                 cuda  no   0.1     yes    yes  sdpa_written_out
cope                 cuda  no   0.1     yes    no   refused
cope                 cuda  yes  0.0     no     yes  sdpa_written_out
cope                 cuda  yes  0.0     no     no   refused
cope                 cuda  yes  0.0     yes    yes  sdpa_written_out
cope                 cuda  yes  0.0     yes    no   refused
cope                 cuda  yes  0.1     no     yes  sdpa_written_out
cope                 cuda  yes  0.1     no     no   refused
cope                 cuda  yes  0.1     yes    yes  sdpa_written_out
cope                 cuda  yes  0.1     yes    no   refused
alibi+dape           cpu   no   0.0     no     yes  blocked
alibi+dape           cpu   no   0.0     no     no   refused
alibi+dape           cpu   no   0.0     yes    yes  blocked
alibi+dape           cpu   no   0.0     yes    no   refused
alibi+dape           cpu   no   0.1     no     yes  blocked
alibi+dape           cpu   no   0.1     no     no   refused
alibi+dape           cpu   no   0.1     yes    yes  blocked
alibi+dape           cpu   no   0.1     yes    no   refused
alibi+dape           cpu   yes  0.0     no     yes  sdpa_written_out
alibi+dape           cpu   yes  0.0     no     no   refused
alibi+dape           cpu   yes  0.0     yes    yes  sdpa_written_out
alibi+dape           cpu   yes  0.0     yes    no   refused
alibi+dape           cpu   yes  0.1     no     yes  sdpa_written_out
alibi+dape           cpu   yes  0.1     no     no   refused
alibi+dape           cpu   yes  0.1     yes    yes  sdpa_written_out
alibi+dape           cpu   yes  0.1     yes    no   refused
alibi+dape           cuda  no   0.0     no     yes  sdpa_written_out
alibi+dape           cuda  no   0.0     no     no   refused
alibi+dape           cuda  no   0.0     yes    yes  sdpa_written_out
alibi+dape           cuda  no   0.0     yes    no   refused
alibi+dape           cuda  no   0.1     no     yes  sdpa_written_out
alibi+dape           cuda  no   0.1     no     no   refused
alibi+dape           cuda  no   0.1     yes    yes  sdpa_written_out
alibi+dape           cuda  no   0.1     yes    no   refused
alibi+dape           cuda  yes  0.0     no     yes  sdpa_written_out
alibi+dape           cuda  yes  0.0     no     no   refused
alibi+dape           cuda  yes  0.0     yes    yes  sdpa_written_out
alibi+dape           cuda  yes  0.0     yes    no   refused
alibi+dape           cuda  yes  0.1     no     yes  sdpa_written_out
alibi+dape           cuda  yes  0.1     no     no   refused
alibi+dape           cuda  yes  0.1     yes    yes  sdpa_written_out
alibi+dape           cuda  yes  0.1     yes    no   refused
alibi+documents      cpu   no   0.0     no     yes  sdpa
alibi+documents      cpu   no   0.0     no     no   blocked
alibi+documents      cpu   no   0.0     yes    yes  sdpa
alibi+documents      cpu   no   0.0     yes    no   blocked
alibi+documents      cpu   no   0.1     no     yes  sdpa
alibi+documents      cpu   no   0.1     no     no   blocked
alibi+documents      cpu   no   0.1     yes    yes  sdpa
alibi+documents      cpu   no   0.1     yes    no   blocked
alibi+documents      cpu   yes  0.0     no     yes  sdpa
alibi+documents      cpu   yes  0.0     no     no   blocked
alibi+documents      cpu   yes  0.0     yes    yes  sdpa
alibi+documents      cpu   yes  0.0     yes    no   blocked
alibi+documents      cpu   yes  0.1     no     yes  sdpa
alibi+documents      cpu   yes  0.1     no     no   blocked
alibi+documents      cpu   yes  0.1     yes    yes  sdpa
alibi+documents      cpu   yes  0.1     yes    no   blocked
alibi+documents      cuda  no   0.0     no     yes  sdpa
alibi+documents      cuda  no   0.0     no     no   flex
alibi+documents      cuda  no   0.0     yes    yes  sdpa
alibi+documents      cuda  no   0.0     yes    no   flex
alibi+documents      cuda  no   0.1     no     yes  sdpa
alibi+documents      cuda  no   0.1     no     no   blocked
alibi+documents      cuda  no   0.1     yes    yes  sdpa
alibi+documents      cuda  no   0.1     yes    no   blocked
alibi+documents      cuda  yes  0.0     no     yes  sdpa
alibi+documents      cuda  yes  0.0     no     no   flex
alibi+documents      cuda  yes  0.0     yes    yes  sdpa
alibi+documents      cuda  yes  0.0     yes    no   flex
alibi+documents      cuda  yes  0.1     no     yes  sdpa
alibi+documents      cuda  yes  0.1     no     no   blocked
alibi+documents      cuda  yes  0.1     yes    yes  sdpa
alibi+documents      cuda  yes  0.1     yes    no   blocked
kerple_log+documents cpu   no   0.0     no     yes  sdpa
kerple_log+documents cpu   no   0.0     no     no   blocked
kerple_log+documents cpu   no   0.0     yes    yes  sdpa
kerple_log+documents cpu   no   0.0     yes    no   blocked
kerple_log+documents cpu   no   0.1     no     yes  sdpa
kerple_log+documents cpu   no   0.1     no     no   blocked
kerple_log+documents cpu   no   0.1     yes    yes  sdpa
kerple_log+documents cpu   no   0.1     yes    no   blocked
kerple_log+documents cpu   yes  0.0     no     yes  sdpa_table_gradient
kerple_log+documents cpu   yes  0.0     no     no   blocked_table_gradient
kerple_log+documents cpu   yes  0.0     yes    yes  sdpa_table_gradient
kerple_log+documents cpu   yes  0.0     yes    no   blocked_table_gradient
kerple_log+documents cpu   yes  0.1     no     yes  sdpa
kerple_log+documents cpu   yes  0.1     no     no   blocked
kerple_log+documents cpu   yes  0.1     yes    yes  sdpa
kerple_log+documents cpu   yes  0.1     yes    no   blocked
kerple_log+documents cuda  no   0.0     no     yes  sdpa
kerple_log+documents cuda  no   0.0     no     no   flex
kerple_log+documents cuda  no   0.0     yes    yes  sdpa
kerple_log+documents cuda  no   0.0     yes    no   flex
kerple_log+documents cuda  no   0.1     no     yes  sdpa
kerple_log+documents cuda  no   0.1     no     no   blocked
kerple_log+documents cuda  no   0.1     yes    yes  sdpa
kerple_log+documents cuda  no   0.1     yes    no   blocked
kerple_log+documents cuda  yes  0.0     no     yes  triton
kerple_log+documents cuda  yes  0.0     no     no   triton
kerple_log+documents cuda  yes  0.0     yes    yes  triton
kerple_log+documents cuda  yes  0.0     yes    no   triton
kerple_log+documents cuda  yes  0.1     no     yes  sdpa
kerple_log+documents cuda  yes  0.1     no     no   blocked
kerple_log+documents cuda  yes  0.1     yes    yes  sdpa
kerple_log+documents cuda  yes  0.1     yes    no   blocked
fox+documents        cpu   no   0.0     no     yes  sdpa
fox+documents        cpu   no   0.0     no     no   blocked
fox+documents        cpu   no   0.0     yes    yes  sdpa
fox+documents        cpu   no   0.0     yes    no   blocked
fox+documents        cpu   no   0.1     no     yes  sdpa
fox+documents        cpu   no   0.1     no     no   blocked
fox+documents        cpu   no   0.1     yes    yes  sdpa
fox+documents        cpu   no   0.1     yes    no   blocked
fox+documents        cpu   yes  0.0     no     yes  sdpa
fox+documents        cpu   yes  0.0     no     no   blocked
fox+documents        cpu   yes  0.0     yes    yes  sdpa
fox+documents        cpu   yes  0.0     yes    no   blocked
fox+documents        cpu   yes  0.1     no     yes  sdpa
fox+documents        cpu   yes  0.1     no     no   blocked
fox+documents        cpu   yes  0.1     yes    yes  sdpa
fox+documents        cpu   yes  0.1     yes    no   blocked
fox+documents        cuda  no   0.0     no     yes  sdpa
fox+documents        cuda  no   0.0     no     no   flex
fox+documents        cuda  no   0.0     yes    yes  sdpa
fox+documents        cuda  no   0.0     yes    no   flex
fox+documents        cuda  no   0.1     no     yes  sdpa
fox+documents        cuda  no   0.1     no     no   blocked
fox+documents        cuda  no   0.1     yes    yes  sdpa
fox+documents        cuda  no   0.1     yes    no   blocked
fox+documents        cuda  yes  0.0     no     yes  sdpa
fox+documents        cuda  yes  0.0     no     no   flex
fox+documents        cuda  yes  0.0     yes    yes  sdpa
fox+documents        cuda  yes  0.0     yes    no   flex
fox+documents        cuda  yes  0.1     no     yes  sdpa
fox+documents        cuda  yes  0.1     no     no   blocked
fox+documents        cuda  yes  0.1     yes    yes  sdpa
fox+documents        cuda  yes  0.1     yes    no   blocked
"""
# The channels of the frontier methods (issue 38): a method that replaces the softmax (stickbreaking) and one
# that transforms the keys (path) run only where the weights are written out: `sdpa_written_out` where its
# L x L estimate fits (or with dropout on CPU), else `blocked`; never a fused kernel, never flex.
EXPECTED_FRONTIER = """
stickbreaking           cpu   no   0.0     no     yes  blocked
stickbreaking           cpu   no   0.0     no     no   blocked
stickbreaking           cpu   no   0.0     yes    yes  blocked
stickbreaking           cpu   no   0.0     yes    no   blocked
stickbreaking           cpu   no   0.1     no     yes  sdpa_written_out
stickbreaking           cpu   no   0.1     no     no   blocked
stickbreaking           cpu   no   0.1     yes    yes  sdpa_written_out
stickbreaking           cpu   no   0.1     yes    no   blocked
stickbreaking           cpu   yes  0.0     no     yes  blocked
stickbreaking           cpu   yes  0.0     no     no   blocked
stickbreaking           cpu   yes  0.0     yes    yes  blocked
stickbreaking           cpu   yes  0.0     yes    no   blocked
stickbreaking           cpu   yes  0.1     no     yes  sdpa_written_out
stickbreaking           cpu   yes  0.1     no     no   blocked
stickbreaking           cpu   yes  0.1     yes    yes  sdpa_written_out
stickbreaking           cpu   yes  0.1     yes    no   blocked
stickbreaking           cuda  no   0.0     no     yes  sdpa_written_out
stickbreaking           cuda  no   0.0     no     no   blocked
stickbreaking           cuda  no   0.0     yes    yes  sdpa_written_out
stickbreaking           cuda  no   0.0     yes    no   blocked
stickbreaking           cuda  no   0.1     no     yes  sdpa_written_out
stickbreaking           cuda  no   0.1     no     no   blocked
stickbreaking           cuda  no   0.1     yes    yes  sdpa_written_out
stickbreaking           cuda  no   0.1     yes    no   blocked
stickbreaking           cuda  yes  0.0     no     yes  sdpa_written_out
stickbreaking           cuda  yes  0.0     no     no   blocked
stickbreaking           cuda  yes  0.0     yes    yes  sdpa_written_out
stickbreaking           cuda  yes  0.0     yes    no   blocked
stickbreaking           cuda  yes  0.1     no     yes  sdpa_written_out
stickbreaking           cuda  yes  0.1     no     no   blocked
stickbreaking           cuda  yes  0.1     yes    yes  sdpa_written_out
stickbreaking           cuda  yes  0.1     yes    no   blocked
path                    cpu   no   0.0     no     yes  blocked
path                    cpu   no   0.0     no     no   blocked
path                    cpu   no   0.0     yes    yes  blocked
path                    cpu   no   0.0     yes    no   blocked
path                    cpu   no   0.1     no     yes  sdpa_written_out
path                    cpu   no   0.1     no     no   blocked
path                    cpu   no   0.1     yes    yes  sdpa_written_out
path                    cpu   no   0.1     yes    no   blocked
path                    cpu   yes  0.0     no     yes  blocked
path                    cpu   yes  0.0     no     no   blocked
path                    cpu   yes  0.0     yes    yes  blocked
path                    cpu   yes  0.0     yes    no   blocked
path                    cpu   yes  0.1     no     yes  sdpa_written_out
path                    cpu   yes  0.1     no     no   blocked
path                    cpu   yes  0.1     yes    yes  sdpa_written_out
path                    cpu   yes  0.1     yes    no   blocked
path                    cuda  no   0.0     no     yes  sdpa_written_out
path                    cuda  no   0.0     no     no   blocked
path                    cuda  no   0.0     yes    yes  sdpa_written_out
path                    cuda  no   0.0     yes    no   blocked
path                    cuda  no   0.1     no     yes  sdpa_written_out
path                    cuda  no   0.1     no     no   blocked
path                    cuda  no   0.1     yes    yes  sdpa_written_out
path                    cuda  no   0.1     yes    no   blocked
path                    cuda  yes  0.0     no     yes  sdpa_written_out
path                    cuda  yes  0.0     no     no   blocked
path                    cuda  yes  0.0     yes    yes  sdpa_written_out
path                    cuda  yes  0.0     yes    no   blocked
path                    cuda  yes  0.1     no     yes  sdpa_written_out
path                    cuda  yes  0.1     no     no   blocked
path                    cuda  yes  0.1     yes    yes  sdpa_written_out
path                    cuda  yes  0.1     yes    no   blocked
stickbreaking+documents cpu   no   0.0     no     yes  sdpa_written_out
stickbreaking+documents cpu   no   0.0     no     no   blocked
stickbreaking+documents cpu   no   0.0     yes    yes  sdpa_written_out
stickbreaking+documents cpu   no   0.0     yes    no   blocked
stickbreaking+documents cpu   no   0.1     no     yes  sdpa_written_out
stickbreaking+documents cpu   no   0.1     no     no   blocked
stickbreaking+documents cpu   no   0.1     yes    yes  sdpa_written_out
stickbreaking+documents cpu   no   0.1     yes    no   blocked
stickbreaking+documents cpu   yes  0.0     no     yes  sdpa_written_out
stickbreaking+documents cpu   yes  0.0     no     no   blocked
stickbreaking+documents cpu   yes  0.0     yes    yes  sdpa_written_out
stickbreaking+documents cpu   yes  0.0     yes    no   blocked
stickbreaking+documents cpu   yes  0.1     no     yes  sdpa_written_out
stickbreaking+documents cpu   yes  0.1     no     no   blocked
stickbreaking+documents cpu   yes  0.1     yes    yes  sdpa_written_out
stickbreaking+documents cpu   yes  0.1     yes    no   blocked
stickbreaking+documents cuda  no   0.0     no     yes  sdpa_written_out
stickbreaking+documents cuda  no   0.0     no     no   blocked
stickbreaking+documents cuda  no   0.0     yes    yes  sdpa_written_out
stickbreaking+documents cuda  no   0.0     yes    no   blocked
stickbreaking+documents cuda  no   0.1     no     yes  sdpa_written_out
stickbreaking+documents cuda  no   0.1     no     no   blocked
stickbreaking+documents cuda  no   0.1     yes    yes  sdpa_written_out
stickbreaking+documents cuda  no   0.1     yes    no   blocked
stickbreaking+documents cuda  yes  0.0     no     yes  sdpa_written_out
stickbreaking+documents cuda  yes  0.0     no     no   blocked
stickbreaking+documents cuda  yes  0.0     yes    yes  sdpa_written_out
stickbreaking+documents cuda  yes  0.0     yes    no   blocked
stickbreaking+documents cuda  yes  0.1     no     yes  sdpa_written_out
stickbreaking+documents cuda  yes  0.1     no     no   blocked
stickbreaking+documents cuda  yes  0.1     yes    yes  sdpa_written_out
stickbreaking+documents cuda  yes  0.1     yes    no   blocked
path+documents          cpu   no   0.0     no     yes  sdpa_written_out
path+documents          cpu   no   0.0     no     no   blocked
path+documents          cpu   no   0.0     yes    yes  sdpa_written_out
path+documents          cpu   no   0.0     yes    no   blocked
path+documents          cpu   no   0.1     no     yes  sdpa_written_out
path+documents          cpu   no   0.1     no     no   blocked
path+documents          cpu   no   0.1     yes    yes  sdpa_written_out
path+documents          cpu   no   0.1     yes    no   blocked
path+documents          cpu   yes  0.0     no     yes  sdpa_written_out
path+documents          cpu   yes  0.0     no     no   blocked
path+documents          cpu   yes  0.0     yes    yes  sdpa_written_out
path+documents          cpu   yes  0.0     yes    no   blocked
path+documents          cpu   yes  0.1     no     yes  sdpa_written_out
path+documents          cpu   yes  0.1     no     no   blocked
path+documents          cpu   yes  0.1     yes    yes  sdpa_written_out
path+documents          cpu   yes  0.1     yes    no   blocked
path+documents          cuda  no   0.0     no     yes  sdpa_written_out
path+documents          cuda  no   0.0     no     no   blocked
path+documents          cuda  no   0.0     yes    yes  sdpa_written_out
path+documents          cuda  no   0.0     yes    no   blocked
path+documents          cuda  no   0.1     no     yes  sdpa_written_out
path+documents          cuda  no   0.1     no     no   blocked
path+documents          cuda  no   0.1     yes    yes  sdpa_written_out
path+documents          cuda  no   0.1     yes    no   blocked
path+documents          cuda  yes  0.0     no     yes  sdpa_written_out
path+documents          cuda  yes  0.0     no     no   blocked
path+documents          cuda  yes  0.0     yes    yes  sdpa_written_out
path+documents          cuda  yes  0.0     yes    no   blocked
path+documents          cuda  yes  0.1     no     yes  sdpa_written_out
path+documents          cuda  yes  0.1     no     no   blocked
path+documents          cuda  yes  0.1     yes    yes  sdpa_written_out
path+documents          cuda  yes  0.1     yes    no   blocked
"""
HEADS, HEAD_DIM, LENGTH = 4, 16, 256  # 16: the smallest head torch's CUDA FlexAttention compiles
FITS, DOES_NOT_FIT = 2**62, 0  # budgets in bytes


def rows(table=EXPECTED):
    for line in table.strip().splitlines():
        kind, device, grad, dropout, window, fits, strategy = line.split()
        yield kind, device, grad == "yes", float(dropout), window == "yes", fits == "yes", strategy


def inputs_for(kind, device, grad, dropout, window) -> AttentionInputs:
    """What plan_attention sees for this method on CPU, with the device it would run on. `kind`: a method,
    `+dape` for it wrapped by dape, `+documents` for packed documents masked (reset-attention-mask)."""
    name, *extras = kind.split("+")
    torch.manual_seed(0)
    pe = build_positional_embedding(name, num_heads=HEADS, head_dim=HEAD_DIM, hidden_size=HEADS * HEAD_DIM)
    if "dape" in extras:
        pe = daped(pe, {"version": 2})
    positions = torch.arange(LENGTH)
    with torch.set_grad_enabled(grad):  # a learnable table requires a gradient only under autograd
        tables = pe.distance_tables(LENGTH) if ("query_terms" not in pe.channels) else (None, None)
    inputs = AttentionInputs.describe(pe, positions, *tables, window=100 if window else None, block_size=64,
                                      needs_grad=grad, dropout_p=dropout, dtype=torch.float32, batch=2,
                                      documents="documents" in extras)
    return inputs.with_run(device_type=device)


def test_the_table_covers_every_combination_once():
    keys = [row[:6] for row in rows()]
    assert len(keys) == len(set(keys)) == 5 * 2 * 2 * 2 * 2 * 2


@pytest.mark.parametrize("kind", ["none", "alibi", "kerple_log", "kerple_bias_weight", "fire"])
def test_auto_decides_as_the_table_says(kind):
    wrong = []
    for row_kind, device, grad, dropout, window, fits, expected in rows():
        if row_kind != kind:
            continue
        inputs = inputs_for(kind, device, grad, dropout, window)
        strategy = choose_strategy("auto", inputs, FITS if fits else DOES_NOT_FIT)
        if strategy.name != expected:
            wrong.append((device, grad, dropout, window, fits, strategy.name, expected))
        assert strategy.can_run(inputs) is None  # auto never takes what cannot run
        if not fits and (inputs.has_terms or inputs.run.windowed):
            assert not strategy.quadratic_memory, "an L x L estimate over the budget must not be materialised"
    assert not wrong, f"{kind}: (device, grad, dropout, window, fits, chosen, expected): {wrong}"


def test_the_channel_table_covers_every_combination_once():
    keys = [row[:6] for row in rows(EXPECTED_CHANNELS)]
    assert len(keys) == len(set(keys)) == 6 * 2 * 2 * 2 * 2 * 2


@pytest.mark.parametrize("kind", ["fox", "cope", "alibi+dape", "alibi+documents", "kerple_log+documents",
                                  "fox+documents"])
def test_auto_decides_for_documents_token_terms_and_score_rewrites_as_the_table_says(kind):
    wrong = []
    for row_kind, device, grad, dropout, window, fits, expected in rows(EXPECTED_CHANNELS):
        if row_kind != kind:
            continue
        inputs = inputs_for(kind, device, grad, dropout, window)
        try:
            strategy = choose_strategy("auto", inputs, FITS if fits else DOES_NOT_FIT)
        except NeoXArgsError as refusal:
            assert "past the memory budget" in str(refusal)
            chosen = "refused"
        else:
            chosen = strategy.name
            assert strategy.can_run(inputs) is None  # auto never takes what cannot run
        if chosen != expected:
            wrong.append((device, grad, dropout, window, fits, chosen, expected))
    assert not wrong, f"{kind}: (device, grad, dropout, window, fits, chosen, expected): {wrong}"


def test_a_named_path_takes_its_first_strategy_that_can_run_or_says_why_not():
    inputs = inputs_for("kerple_log", "cpu", True, 0.0, False)
    assert choose_strategy("sdpa", inputs, DOES_NOT_FIT).name == "sdpa_table_gradient"  # no budget for named paths
    assert choose_strategy("blocked", inputs, FITS).name == "toeplitz_table_gradient"
    with pytest.raises(NeoXArgsError, match=r"^attention-impl is 'flex', but torch's FlexAttention has no backward "
                       r"pass on CPU \(device cpu, gradients needed, attention-dropout 0.0\)\. Set attention-impl to "
                       r"'blocked' or 'auto' for this run, or run on a CUDA device\.$"):
        choose_strategy("flex", inputs, FITS)
    fire = inputs_for("fire", "cuda", False, 0.0, False)
    with pytest.raises(NeoXArgsError, match=r"^attention-impl is 'flex', but this positional method's bias depends "
                       r"on the query position itself.*Set attention-impl to 'blocked', 'sdpa' or 'auto'\.$"):
        choose_strategy("flex", fire, FITS)
    with pytest.raises(NeoXArgsError, match=r"^attention-impl is 'fast'; choose one of auto, sdpa, flex, blocked, fla, triton, sdpa_mask_gradient\.$"):
        choose_strategy("fast", fire, FITS)


def test_flex_on_cuda_refuses_heads_below_16_and_auto_passes_it_over():
    """torch's CUDA FlexAttention fails to compile for a head dimension below 16 (an H200, torch 2.11: "NYI:
    embedding dimension ... must be at least 16"): a named `flex` says so before compiling, `auto` takes the
    next path; the CPU kernel takes small heads."""
    small = inputs_for("alibi", "cuda", True, 0.0, True).with_run(head_dim=8)
    with pytest.raises(NeoXArgsError, match=r"^attention-impl is 'flex', but torch's CUDA FlexAttention kernel takes "
                       r"head dimensions of at least 16, and this model's is 8 \(hidden-size / num-attention-heads\)\. "
                       r"Set attention-impl to 'auto', 'sdpa' or 'blocked', or use fewer, larger heads\.$"):
        choose_strategy("flex", small, FITS)
    assert choose_strategy("auto", small, DOES_NOT_FIT).name == "blocked"
    assert choose_strategy("auto", small.with_run(head_dim=16), DOES_NOT_FIT).name == "flex"
    assert choose_strategy("flex", small.with_run(device_type="cpu", needs_grad=False), FITS).name == "flex"


def test_every_strategy_says_why_it_cannot_run():
    # A distance-only method on CUDA with dropout: the CPU row, the table gradient and flex refuse, each
    # with its reason; the last strategy of sdpa and of blocked runs every method.
    inputs = inputs_for("kerple_log", "cuda", True, 0.1, True)
    reasons = {name: strategy.can_run(inputs) for name, strategy in STRATEGIES.items()}
    assert reasons["toeplitz"] == "it runs only with a CPU device (it calls torch's CPU flash kernel directly)"
    assert "CPU flash kernel" in reasons["toeplitz_table_gradient"]
    cpu = inputs_for("kerple_log", "cpu", True, 0.0, True)
    assert STRATEGIES["toeplitz"].can_run(cpu) == "it does not handle a learnable bias's gradient"
    assert "dropout" in reasons["sdpa_table_gradient"] and "dropout" in reasons["blocked_table_gradient"]
    assert "dropout" in reasons["flex"]
    for path in ("sdpa", "blocked"):
        assert PATH_STRATEGIES[path][-1].can_run(inputs_for("kerple_bias_weight", "cpu", True, 0.1, True)) is None


@pytest.mark.parametrize("kind", ["none", "alibi", "kerple_log", "kerple_bias_weight", "fire"])
def test_only_strategies_marked_quadratic_grow_with_the_square_of_the_length(kind):
    # `auto` checks the budget only for strategies marked quadratic_memory: every other one must be
    # O(L) at a fixed block size (doubling L at most doubles it, give or take the (L/128)^2 tile count).
    for grad, window in ((False, False), (True, True)):
        short = inputs_for(kind, "cpu", grad, 0.0, window)
        long = short.with_run(length=4 * short.run.length)
        for name, strategy in STRATEGIES.items():
            if strategy.can_run(short) is not None or strategy.memory_bytes(short) == 0:
                continue
            growth = strategy.memory_bytes(long) / strategy.memory_bytes(short)
            if strategy.quadratic_memory:
                assert growth == 16, (name, growth)
            else:
                assert 1 < growth <= 4.1, (name, growth)


def test_the_cached_step_is_linear_in_the_keys():
    from megatron.model.attention.cached import CachedPlan
    sizes = dict(batch=3, heads=4, head_dim=16, queries=1, capacity=1024, element_size=4, pairwise_bytes=8 + 8 * 4,
                 has_weight=False)
    cache = 2 * 3 * 4 * 1024 * 16 * 4  # keys and values of one layer
    assert CachedPlan.memory_bytes(keys=100, **sizes) == cache + 3 * 100 * (40 + 3 + 4 * 4)
    per_step = CachedPlan.memory_bytes(keys=100, **sizes) - cache
    assert CachedPlan.memory_bytes(keys=200, **sizes) - cache == 2 * per_step


def test_a_strategy_refuses_exactly_what_it_does_not_handle_or_lacks():
    """can_run is the difference between what the forward needs and what the strategy declares."""
    from megatron.model.attention.needs import EVERY_NEED, needs_of
    from megatron.model.attention.strategy import AttentionPlan

    class NoWindow(AttentionPlan):
        handles = EVERY_NEED - {"window"}

    class ForWeights(AttentionPlan):
        handles, requires = EVERY_NEED, frozenset({"weight"})

    windowed, plain = inputs_for("alibi", "cpu", False, 0.0, True), inputs_for("alibi", "cpu", False, 0.0, False)
    assert "window" in needs_of(windowed) and "window" not in needs_of(plain)
    assert NoWindow.can_run(windowed) == "it does not handle an attention window"
    assert NoWindow.can_run(plain) is None
    assert ForWeights.can_run(plain) == "it runs only with a weight that multiplies the scores"
    assert ForWeights.can_run(inputs_for("kerple_bias_weight", "cpu", False, 0.0, False)) is None
    for name, strategy in STRATEGIES.items():  # every declaration is in the vocabulary
        assert strategy.handles <= EVERY_NEED and strategy.requires <= EVERY_NEED, name


def test_a_new_need_is_refused_by_every_strategy_until_it_says_it_handles_it(monkeypatch):
    """A channel added to the protocol (a new need) is computed by no strategy by accident: each lists what it
    handles, so each refuses the new need, with the reason naming it."""
    from megatron.model.attention import needs, strategy as strategy_module
    monkeypatch.setitem(needs.NEEDS, "new_channel", "a new kind of term")
    monkeypatch.setattr(strategy_module, "needs_of", lambda inputs: needs.needs_of(inputs) | {"new_channel"})
    inputs = inputs_for("none", "cpu", False, 0.0, False)
    for name, strategy in STRATEGIES.items():
        # A kernel for another device (triton, fla) refuses the CPU first: asked about a CUDA forward.
        on_its_device = inputs if "cpu" in strategy.handles | strategy.requires else \
            inputs.with_run(device_type="cuda")
        reason = strategy.can_run(on_its_device)
        assert reason is not None and ("a new kind of term" in reason or "runs only with" in reason), (name, reason)
    assert STRATEGIES["blocked"].can_run(inputs) == "it does not handle a new kind of term"


def test_the_frontier_table_covers_every_combination_once():
    keys = [row[:6] for row in rows(EXPECTED_FRONTIER)]
    assert len(keys) == len(set(keys)) == 4 * 2 * 2 * 2 * 2 * 2


@pytest.mark.parametrize("kind", ["stickbreaking", "path", "stickbreaking+documents", "path+documents"])
def test_auto_decides_for_a_new_normaliser_and_key_transforms_as_the_table_says(kind):
    wrong = []
    for row_kind, device, grad, dropout, window, fits, expected in rows(EXPECTED_FRONTIER):
        if row_kind != kind:
            continue
        inputs = inputs_for(kind, device, grad, dropout, window)
        strategy = choose_strategy("auto", inputs, FITS if fits else DOES_NOT_FIT)
        assert strategy.can_run(inputs) is None  # auto never takes what cannot run
        if strategy.name != expected:
            wrong.append((device, grad, dropout, window, fits, strategy.name, expected))
    assert not wrong, f"{kind}: (device, grad, dropout, window, fits, chosen, expected): {wrong}"
