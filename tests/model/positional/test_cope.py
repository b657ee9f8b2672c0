"""`cope` (positional_embeddings/cope.py) against x-transformers' CoPE (requirements-dev.txt pins it),
forward and gradients; against a float64 formula written here with explicit loops, on every attention
path that can run it; the planner's refusals (the fused and table paths, and a length past the memory
budget before anything is allocated); and training and evaluating at 4x through the entry points.
The KV cache and the Hugging Face export are checked for it by the registry-wide tests
(test_generation_cache.py, test_hf_export.py), and test_attention.py's paths too."""
import math
import re

import pytest
import torch
from x_transformers.x_transformers import CoPE as TheirCoPE

from megatron.model.attention import AttentionRun, attend, plan_attention
from megatron.model.attention.choice import choose_strategy
from megatron.model.attention.inputs import AttentionInputs
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.neox_arguments import NeoXArgsError

H, D, P = 3, 16, 12


def cope(max_positions=P, seed=0):
    torch.manual_seed(seed)
    pe = build_positional_embedding("cope", num_heads=H, head_dim=D, hidden_size=H * D,
                                    cope_max_positions=max_positions)
    with torch.no_grad():
        pe.position_table.normal_()  # the method starts at zeros; any table will do here
    return pe


def causal(length):
    return torch.ones(length, length, dtype=torch.bool).tril()


@pytest.mark.parametrize("length, max_positions", [(20, 12), (33, 40), (7, 3)])
def test_forward_and_gradients_match_x_transformers(length, max_positions):
    ours = cope(max_positions)
    theirs = TheirCoPE(dim=D, heads=H, max_pos=max_positions)
    with torch.no_grad():
        theirs.pos_emb.copy_(ours.position_table)
    torch.manual_seed(1)
    q0, k0 = torch.randn(2, H, length, D), torch.randn(2, H, length, D)
    visible = causal(length)
    weights = torch.randn(2, H, length, length)  # a loss that weighs every visible logit differently

    def run(side):
        q, k = q0.clone().requires_grad_(), k0.clone().requires_grad_()
        scores = q @ k.transpose(-1, -2) / math.sqrt(D)
        if side == "ours":
            logits = ours.modify_scores(scores, None, q, k, torch.arange(length), torch.arange(length), visible)
            table = ours.position_table
        else:  # their Attend: future logits set to -finfo.max, then sim + cope(q, sim)
            sim = scores.masked_fill(~visible, -torch.finfo(scores.dtype).max)
            logits = sim + theirs(q, sim)
            table = theirs.pos_emb
        loss = (logits * weights).masked_fill(~visible, 0).sum()
        grads = torch.autograd.grad(loss, [q, k, table])
        return logits.masked_fill(~visible, 0), grads

    (ours_logits, ours_grads), (their_logits, their_grads) = run("ours"), run("theirs")
    torch.testing.assert_close(ours_logits, their_logits, atol=1e-5, rtol=1e-5)
    for name, a, b in zip(("q", "k", "table"), ours_grads, their_grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=lambda m: f"gradient of {name}: {m}")


def formula_attention(q, k, v, table, window=None):
    """float64 attention with CoPE from the paper's definitions, one (b, h, i, j) at a time."""
    q, k, v, table = (t.double() for t in (q, k, v, table))
    b, heads, length, d = q.shape
    out = torch.zeros_like(q)
    for n in range(b):
        for h in range(heads):
            for i in range(length):
                seen = [j for j in range(length) if j <= i and (window is None or i - j < window)]
                s = {j: float(q[n, h, i] @ k[n, h, j]) / math.sqrt(d) for j in seen}
                gate = {j: 1 / (1 + math.exp(-s[j])) for j in seen}
                logits = []
                for j in seen:
                    p = min(sum(gate[t] for t in seen if t >= j), table.shape[0] - 1)
                    low, high = math.floor(p), math.ceil(p)
                    e = table[low] * (1 - (p - low)) + table[high] * (p - low)
                    logits.append(s[j] + float(q[n, h, i] @ e))
                weights = torch.tensor(logits, dtype=torch.float64).softmax(0)
                out[n, h, i] = sum(w * v[n, h, j] for w, j in zip(weights, seen))
    return out


@pytest.mark.parametrize("window", [None, 5])
def test_every_path_that_runs_it_equals_the_float64_formula(window):
    pe, length = cope(max_positions=6), 19
    torch.manual_seed(2)
    q, k, v = (torch.randn(2, H, length, D) for _ in range(3))
    expected = formula_attention(q, k, v, pe.position_table.detach(), window)
    positions = torch.arange(length)
    for impl, block in (("sdpa", 8), ("blocked", 8), ("blocked", 1), ("blocked", 64), ("auto", 8)):
        plan = plan_attention(pe, positions, AttentionRun(impl=impl, window=window, block_size=block, needs_grad=False,
                                                          dropout_p=0.0))
        with torch.no_grad():
            out = attend(q, k, v, plan)
        torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0, msg=lambda m: f"{impl}/{block}: {m}")


def test_blocked_gradients_equal_the_written_out_matrix():
    pe, length = cope(), 24
    torch.manual_seed(3)
    inputs = [torch.randn(1, H, length, D, requires_grad=True) for _ in range(3)]
    grads = {}
    for impl in ("sdpa", "blocked"):
        plan = plan_attention(pe, torch.arange(length), AttentionRun(impl=impl, window=None, block_size=7,
                                                                     needs_grad=True, dropout_p=0.0))
        out = attend(*inputs, plan)
        grads[impl] = torch.autograd.grad(out.square().sum(), [*inputs, pe.position_table])
    for a, b in zip(grads["sdpa"], grads["blocked"]):  # fp32 sums of different lengths: a few ulps of 10-100
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)


def test_paths_that_cannot_run_it_refuse_and_auto_takes_a_written_out_one():
    pe, positions = cope(), torch.arange(32)
    with pytest.raises(NeoXArgsError, match=r"attention-impl is 'flex', but this positional method rewrites the "
                                            r"whole score matrix"):
        plan_attention(pe, positions, AttentionRun(impl="flex", window=None, block_size=8, needs_grad=False,
                                                   dropout_p=0.0))
    for grad, taken in ((False, "blocked"), (True, "sdpa_written_out")):  # CPU: the faster of the two (auto_preferences)
        plan = plan_attention(pe, positions, AttentionRun(impl="auto", window=None, block_size=8, needs_grad=grad,
                                                          dropout_p=0.0))
        assert plan.name == taken


def test_a_length_past_the_memory_budget_is_refused_before_allocating_with_the_number():
    pe = cope()

    def inputs(length):
        return AttentionInputs.describe(pe, torch.arange(length), None, None, window=None, block_size=128,
                                        needs_grad=True, dropout_p=0.0, dtype=torch.float32, batch=1)
    budget = 512 * 2**20
    strategy = choose_strategy("auto", inputs(4096), budget)  # fits: 128 x 4096 pairs a block
    with pytest.raises(NeoXArgsError, match=r"attention at 200000 tokens .* past the memory budget of 512 MB") as refusal:
        choose_strategy("auto", inputs(200_000), budget)
    longest = int(re.search(r"The longest length that fits is (\d+) tokens", str(refusal.value)).group(1))
    assert strategy.memory_bytes(inputs(longest)) <= budget < strategy.memory_bytes(inputs(longest + 1))
    with pytest.raises(NeoXArgsError, match=r"on the 'sdpa_written_out' strategy, past the memory budget"):
        choose_strategy("sdpa", inputs(4096), budget)  # the full matrix does not fit where blocks do
    # And through the model's planner: refused before a [b, H, L, L] tensor exists.
    with pytest.raises(NeoXArgsError, match=r"attention at 200000 tokens"):
        plan_attention(pe, torch.arange(200_000), AttentionRun(impl="auto", window=None, block_size=128,
                                                               needs_grad=True, dropout_p=0.0, memory_budget_mb=512))
