"""The table gradient (megatron/model/attention/table_gradient.py) against autograd through the reference.

For every learnable distance-only method the `sdpa` and `blocked` paths take the custom gradient;
their q/k/v and parameter gradients (kernel parameters included) must equal float64 autograd through
megatron/model/attention/reference.py."""
import pytest
import torch

from megatron.model.attention import AttentionRun, attend, plan_attention, reference
from megatron.model.positional_embeddings import available, build_positional_embedding

HEADS, HEAD_DIM, LENGTH, BLOCK = 3, 8, 40, 16  # 40 = two full blocks and a partial one


def make_pe(name):
    torch.manual_seed(0)
    pe = build_positional_embedding(name, num_heads=HEADS, head_dim=HEAD_DIM, hidden_size=HEADS * HEAD_DIM,
                                    max_position_embeddings=4 * LENGTH)
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.rand_like(p))  # off the initial values, so nothing is special
    return pe.double()


def learnable_tables(pe):
    """A learnable table at LENGTH positions: the distance-only methods', and fire's below its threshold."""
    tables = pe.distance_tables_at(torch.arange(LENGTH), LENGTH)
    return tables is not None and any(t is not None and t.requires_grad for t in tables)


LEARNABLE = [name for name in available() if learnable_tables(make_pe(name))]


def reference_attention(pe, q, k, v, window):
    return reference.attention(q, k, v, pe, torch.arange(LENGTH), window=window)


def gradients(pe, fn):
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, HEADS, LENGTH, HEAD_DIM, dtype=torch.float64, requires_grad=True) for _ in range(3))
    out = fn(q, k, v)
    torch.manual_seed(2)
    (out * torch.randn_like(out)).sum().backward()
    grads = [t.grad for t in (q, k, v)] + [p.grad.clone() for p in pe.parameters()]
    pe.zero_grad()
    return out.detach(), grads


def test_some_methods_are_learnable():
    assert {"kerple_log", "t5", "fire"} <= set(LEARNABLE)


@pytest.mark.parametrize("window", [None, 7])
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
@pytest.mark.parametrize("name", LEARNABLE)
def test_table_gradient_matches_float64_autograd(name, impl, window):
    pe = make_pe(name)
    plans = []

    def path(q, k, v):
        plan = plan_attention(pe, torch.arange(LENGTH), AttentionRun(impl=impl, window=window, block_size=BLOCK,
                                                                     needs_grad=True, dropout_p=0.0))
        plans.append(plan)
        return attend(q, k, v, plan)

    out, grads = gradients(pe, path)
    expected_out, expected = gradients(pe, lambda q, k, v: reference_attention(pe, q, k, v, window))
    if pe.distance_tables_at(torch.arange(LENGTH), LENGTH)[1] is None:  # no multiplicative weight
        assert plans[0].table_grad, "a learnable bias table should take the table gradient"
    torch.testing.assert_close(out, expected_out, rtol=1e-9, atol=1e-10)
    assert len(grads) == len(expected) > 3
    for got, want in zip(grads[:3], expected[:3]):  # q, k, v
        torch.testing.assert_close(got, want, rtol=1e-8, atol=1e-10)
    # Methods build their tables in float32 (positional_embeddings/base.py), so a parameter's gradient
    # passes through a float32 table gradient on either side: agreement to float32 rounding.
    for got, want in zip(grads[3:], expected[3:]):
        # A wrong gradient is off by O(1); 1e-5 absolute: one that cancels to 0 in exact arithmetic (fire's
        # output bias adds to every distance alike, and each row of the score gradient sums to 0) keeps
        # the float32 table gradient's rounding (2e-6 measured).
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("layout", ["square", "reversed_block"])
def test_cpu_backward_pass_matches_float64_autograd(dtype, layout):
    """The CPU backward pass (dq, dk, dv and the table's gradient from one P) in the dtypes training
    runs, on the `sdpa` layout (a square causal call) and Toeplitz's (a block of the last queries
    against the keys in reverse order), against float64 autograd through the softmax written out.
    Head dim 64 takes blocks of 64 rows: 100 queries are one full block and a partial one."""
    from megatron.model.attention.table_gradient import attend_with_table
    torch.manual_seed(3)
    heads, dim, length = 2, 64, 100
    queries = length if layout == "square" else 37
    table = (-torch.rand(heads, length) * 3).requires_grad_()
    q = torch.randn(2, heads, queries, dim)
    k, v = torch.randn(2, heads, length, dim), torch.randn(2, heads, length, dim)
    q_positions = torch.arange(length - queries, length)
    k_positions = torch.arange(length) if layout == "square" else torch.arange(length).flip(0)
    allowed = q_positions[:, None] >= k_positions[None, :]
    grad_out = torch.randn(2, heads, queries, dim)

    def run(q, k, v, table, fn):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v, table)]
        out = fn(*leaves)
        out.backward(grad_out.to(out.dtype))
        return [out.detach().double()] + [t.grad.double() for t in leaves]

    def written_out(q, k, v, table):
        distance = (q_positions[:, None] - k_positions[None, :]).clamp(min=0)
        return reference.attend(q, k, v, None, q_positions, k_positions, allowed, bias=table[:, distance])

    def ours(q, k, v, table):
        return attend_with_table(q, k, v, table, q_positions, k_positions, allowed,
                                 causal=layout == "square", reversed_keys=layout == "reversed_block")

    expected = run(*(t.to(dtype).double() for t in (q, k, v)), table.double(), written_out)  # the same inputs
    got = run(q.to(dtype), k.to(dtype), v.to(dtype), table, ours)
    tolerance = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=0.02, atol=0.02)
    for name, g, e in zip(["out", "dq", "dk", "dv", "dtable"], got, expected):
        torch.testing.assert_close(g, e, **tolerance, msg=lambda m: f"{name}: {m}")
