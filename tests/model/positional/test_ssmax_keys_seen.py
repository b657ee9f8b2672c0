"""attention-temperature's ssmax takes n = the keys a query sees, in every layout (issue 38): packed
documents with running positions (reset-attention-mask, no reset-position-ids), an attention window,
random-positions' scattered positions, and the KV cache. Each against a float64 formula written here,
logits_h(i, j) = s_h ln(n_i) (q_i . k_j / sqrt(D) + bias_h(i - j)), with n_i counted from the definition of
visibility (j <= i, same document, p_i - p_j < window), on every strategy that runs the case; and a packed
row's logits equal each document run alone."""
import math

import pytest
import torch
from tests.support.generation import PROMPTS, assert_cache_matches_full_forward, tiny_model

from megatron.model.attention import AttentionRun, flex_kernel, plan_attention
from megatron.model.attention.choice import StrategyCannotRun
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.model.positional_embeddings.temperature import Tempered

H, D = 2, 8
STRATEGIES = ("auto", "sdpa", "sdpa_written_out", "blocked", "toeplitz", "flex")


def ssmax(method):
    torch.manual_seed(0)
    base = build_positional_embedding(method, num_heads=H, head_dim=D, hidden_size=H * D, max_position_embeddings=64)
    pe = Tempered(base, {"type": "ssmax"})
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.rand_like(p))
    return pe.double()


def formula(q, k, v, pe, positions, documents=None, window=None):
    """float64 [b, H, s, D], one query at a time; kerple_log's bias from its parameters, rotary's q and k
    rotated by the method (its rotation is tested against transformers elsewhere)."""
    q, k = pe.base.rotate_qk(q.double(), k.double(), positions, positions)
    s_h = pe.temperature_scale.detach().double()
    params = {name: value.detach().double() for name, value in pe.base.kernel_parameters().items()}
    b, _, length, _ = q.shape
    out = torch.zeros(b, H, length, D, dtype=torch.float64)
    for r in range(b):
        for i in range(length):
            keys = [j for j in range(i + 1) if (documents is None or documents[r, j] == documents[r, i])
                    and (window is None or positions[i] - positions[j] < window)]
            n = len(keys)
            for h in range(H):
                logits = torch.stack([q[r, h, i] @ k[r, h, j] / math.sqrt(D) for j in keys])
                if "r1" in params:
                    d = torch.tensor([float(positions[i] - positions[j]) for j in keys], dtype=torch.float64)
                    logits = logits - params["r1"][h] * torch.log1p(params["r2"][h] * d)
                weights = (s_h[h] * math.log(n) * logits).softmax(0)
                out[r, h, i] = weights @ v[r, h, keys].double()
    return out


def ours(q, k, v, pe, positions, strategy, documents=None, window=None):
    with torch.no_grad(), flex_kernel.reference_math():
        plan = plan_attention(pe, positions, AttentionRun(impl="auto", window=window, block_size=4, needs_grad=False,
                                                          dropout_p=0.0, dtype=torch.float64, batch=q.shape[0],
                                                          documents=documents),
                              strategy=None if strategy == "auto" else strategy)
        return plan.attend(*plan.rotate(q, k), v, 0.0)


def inputs(b, length):
    torch.manual_seed(1)
    return tuple(torch.randn(b, H, length, D, dtype=torch.float64) for _ in range(3))


def run_or_skip(*args, **kwargs):
    try:
        return ours(*args, **kwargs)
    except StrategyCannotRun as reason:
        pytest.skip(str(reason))


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("method", ["kerple_log", "rotary", "none"])
@pytest.mark.parametrize("window", [None, 3])
def test_packed_documents_with_running_positions(method, strategy, window):
    documents = torch.tensor([[0, 0, 0, 0, 0, 1, 1, 1], [0, 0, 1, 1, 1, 1, 1, 2]])
    pe, positions = ssmax(method), torch.arange(8)
    q, k, v = inputs(2, 8)
    got = run_or_skip(q, k, v, pe, positions, strategy, documents, window)
    torch.testing.assert_close(got, formula(q, k, v, pe, positions, documents, window), atol=1e-6, rtol=0)
    # each document run alone, at positions 0.. (every method here is relative: the same logits)
    for r in range(2):
        for doc in documents[r].unique():
            part = (documents[r] == doc).nonzero().flatten()
            alone = ours(*(t[r:r + 1, :, part] for t in (q, k, v)), pe, torch.arange(len(part)), "auto",
                         window=window)
            torch.testing.assert_close(got[r:r + 1, :, part], alone, atol=1e-6, rtol=0)


def test_the_issue_example_query_6_sees_2_keys():
    """Documents [0 0 0 0 0 | 1 1 1], equal scores: query 6 weighs its 2 keys as n = 2 says, not n = 7."""
    pe = ssmax("none")
    with torch.no_grad():
        pe.temperature_scale.fill_(1.0)
    q = torch.zeros(1, H, 8, D, dtype=torch.float64)
    k = torch.zeros_like(q)
    q[..., 0], k[..., 0] = 1.0, torch.tensor([0.0] * 5 + [3.0, 2.0, 0.0], dtype=torch.float64)
    v = torch.eye(8, dtype=torch.float64)[None, None, :, :D].expand(1, H, 8, D).contiguous()
    documents = torch.tensor([[0] * 5 + [1] * 3])
    got = ours(q, k, v, pe, torch.arange(8), "sdpa", documents)[0, 0, 6, 5:7]
    logits = torch.tensor([3.0, 2.0], dtype=torch.float64) / math.sqrt(D) * math.log(2)
    torch.testing.assert_close(got, logits.softmax(0), atol=1e-7, rtol=0)


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("method", ["kerple_log", "rotary"])
@pytest.mark.parametrize("window", [None, 40])
def test_random_positions_count_the_keys_not_the_drawn_position(method, strategy, window):
    positions = torch.tensor([0, 3, 7, 20, 41, 300, 301, 330, 333, 350])  # sorted draws, as random-positions
    pe = ssmax(method)
    q, k, v = inputs(1, len(positions))
    got = run_or_skip(q, k, v, pe, positions, strategy, window=window)
    torch.testing.assert_close(got, formula(q, k, v, pe, positions, window=window), atol=1e-6, rtol=0)


@pytest.mark.parametrize("overrides", [{}, {"attention_window": 5}, {"pos_emb": "rotary", "attention_window": 6}],
                         ids=["kerple", "kerple-window", "rotary-window"])
def test_the_kv_cache_counts_the_cached_keys_a_query_sees(overrides):
    """Left-padded rows of different lengths, to 4x the training length: each cached step's logits equal a
    full forward of the row alone (whose n the tests above check against the formula)."""
    model = tiny_model(**({"attention_temperature": {"type": "ssmax"}} | overrides))
    assert_cache_matches_full_forward(model, PROMPTS, 20)
