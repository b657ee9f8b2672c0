"""Every attention strategy against the reference (megatron/model/attention/reference.py), in float64.

Every strategy x every registered method (and the two wrappers, attention-temperature and dape, and path's
forget gate and stick-breaking's own token as options), forced
by name: forward, and where it takes gradients, the gradients of q, k, v and of the method's parameters.
A strategy that cannot compute a case is skipped with its own reason (`can_run`), and the last test checks
that each strategy computed at least one method here. The layouts: whole sequences, a window, and packed
documents with per-row positions. The cached-generation step (cached.py), which is planned from a KV cache
rather than chosen, is checked against the same reference over a prompt, a decoding step and the rest."""
import copy
import itertools

import pytest
import torch

from megatron.model.attention import AttentionRun, flex_kernel, plan_attention, reference
from megatron.model.attention.choice import StrategyCannotRun
from megatron.model.attention.registry import STRATEGIES
from megatron.model.positional_embeddings import available, build_positional_embedding
from megatron.model.positional_embeddings.dape import daped
from megatron.model.positional_embeddings.temperature import tempered

HEADS, HEAD_DIM, LENGTH, BLOCK, WINDOW = 2, 8, 24, 16, 7  # 24 = a full block and a partial one
METHODS = available() + ("kerple_log+ssmax", "alibi+dape", "path+forget_gate", "stickbreaking+attend_current")
OPTIONS = {"forget_gate": {"path_forget_gate": True}, "attend_current": {"stickbreaking_attend_current": True}}
LAYOUTS = ("sequence", "window", "documents")
MODES = ("forward", "gradients")


def make_pe(method: str, window):
    name, _, wrapper = method.partition("+")
    torch.manual_seed(0)
    pe = build_positional_embedding(name, num_heads=HEADS, head_dim=HEAD_DIM, hidden_size=HEADS * HEAD_DIM,
                                    max_position_embeddings=4 * LENGTH, **OPTIONS.get(wrapper, {}))
    if wrapper == "ssmax":
        pe = tempered(pe, {"type": "ssmax"})
    elif wrapper == "dape":
        pe = daped(pe, {"version": 2, "hidden": 4})
    with torch.no_grad():  # off the initial values, so nothing is special
        for p in pe.parameters():
            p.add_(0.3 * torch.rand_like(p))
    return pe.double()


def layout(name: str):
    """(window, documents [b, s] or None, per-row positions [b, s] or None)."""
    if name != "documents":
        return (WINDOW if name == "window" else None), None, None
    documents = torch.tensor([[0] * 9 + [1] * 15, [0] * 4 + [1] * 12 + [2] * 8])
    starts = torch.cat([torch.zeros(2, 1, dtype=torch.bool), documents.diff(dim=1) != 0], dim=1)
    index = torch.arange(LENGTH).expand(2, LENGTH)
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
    return None, documents, index - first


def inputs(pe, requires_grad: bool):
    torch.manual_seed(1)
    q, k, v = (torch.randn(2, HEADS, LENGTH, HEAD_DIM, dtype=torch.float64, requires_grad=requires_grad)
               for _ in range(3))
    x = torch.randn(2, LENGTH, HEADS * HEAD_DIM, dtype=torch.float64)  # the layer input per-token terms read
    return q, k, v, x


def run(pe, strategy, layout_name, needs_grad, sink=None, dtype=torch.float64):
    """(output, gradients of q, k, v, pe's parameters and the sink) of `strategy` (None: the reference); sink:
    the layer's sink logits [H] (a learnable attention sink) or None; q, k, v in `dtype` (pe's own)."""
    window, documents, row_positions = layout(layout_name)
    q, k, v, x = (t.to(dtype).detach().requires_grad_(t.requires_grad) for t in inputs(pe, needs_grad))
    positions = torch.arange(LENGTH)
    with torch.set_grad_enabled(needs_grad), flex_kernel.reference_math():
        values = pe.layer_values(x)  # every layer channel's (fox's gate, path's transforms, wall's decays)
        if strategy is None:
            out = reference.attention(q, k, v, pe, positions, window=window, documents=documents,
                                      row_positions=row_positions, sink=sink, **values)
        else:
            plan = plan_attention(pe, positions, AttentionRun(impl="auto", window=window, block_size=BLOCK,
                                                              needs_grad=needs_grad, dropout_p=0.0, dtype=dtype,
                                                              batch=2, documents=documents,
                                                              row_positions=row_positions, sink=sink is not None),
                                  strategy=strategy)
            plan = plan.with_layer({**values, "sink": sink})
            assert plan.name == strategy
            out = plan.attend(*plan.rotate(q, k), v, 0.0)
    if not needs_grad:
        return out, []
    torch.manual_seed(2)
    (out * torch.randn(out.shape, dtype=torch.float64).to(out.dtype)).sum().backward()  # the same in every dtype
    grads = [t.grad for t in (q, k, v)] + [None if p.grad is None else p.grad.clone() for p in pe.parameters()]
    if sink is not None:
        grads.append(sink.grad)
        sink.grad = None
    pe.zero_grad(set_to_none=True)
    return out.detach(), grads


# The `triton` kernel runs here in Triton's interpreter, about 1 to 3 s a case on a shared CPU (all its cases
# 117 s with sdpa_mask_gradient's): the fast tier keeps a bias with a weight (both tables' gradients) in every
# layout and T5's bucketed table (a strided view) with gradients; the other cases are `slow`.
TRITON_FAST = {"kerple_bias_weight": MODES, "t5": ("gradients",)}


def cases():
    for strategy, method, layout_name, mode in itertools.product(sorted(STRATEGIES), METHODS, LAYOUTS, MODES):
        slow = strategy == "triton" and mode not in TRITON_FAST.get(method, ())
        yield pytest.param(strategy, method, layout_name, mode, marks=[pytest.mark.slow] if slow else [],
                           id=f"{strategy}-{method}-{layout_name}-{mode}")


@pytest.mark.parametrize("strategy, method, layout_name, mode", cases())
def test_strategy_matches_the_reference(strategy, method, layout_name, mode, monkeypatch):
    if strategy == "triton":  # its kernel runs on CPU only in Triton's interpreter (triton_flash.py)
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    window = layout(layout_name)[0]
    pe = make_pe(method, window)
    needs_grad = mode == "gradients"
    try:
        out, grads = run(pe, strategy, layout_name, needs_grad)
    except StrategyCannotRun as refusal:
        pytest.skip(refusal.reason)
    expected, expected_grads = run(copy.deepcopy(pe), None, layout_name, needs_grad)
    # Tight, but not float64's eps: the methods build their distance tables in float32 (base.py), and their
    # gradients are summed in a different order by each strategy.
    torch.testing.assert_close(out, expected, atol=1e-7, rtol=1e-6, msg=lambda m: f"output: {m}")
    for i, (got, want) in enumerate(zip(grads, expected_grads)):
        if want is None:
            assert got is None or not got.any(), f"gradient {i}: the reference has none"
            continue
        assert got is not None, f"gradient {i} is missing"
        loose = i >= 3  # a parameter's gradient, through the method's float32 tables
        torch.testing.assert_close(got, want, atol=1e-5 if loose else 1e-6, rtol=1e-4 if loose else 1e-5,
                                   msg=lambda m: f"gradient {i}: {m}")


# The learnable sink (attention-sink) on every strategy that takes it: methods without terms (the flash kernel's
# own path), a fixed and a learnable table, a table with a weight, per-token terms. The `triton` kernel's cases
# (in the interpreter) only with KERPLE-log's learnable table, with gradients.
SINK_METHODS = ("none", "rotary", "alibi", "kerple_log", "kerple_bias_weight", "fox")


def sink_cases():
    for strategy, method, layout_name, mode in itertools.product(sorted(STRATEGIES), SINK_METHODS, LAYOUTS, MODES):
        if strategy == "triton" and (method != "kerple_log" or mode != "gradients"):
            continue
        if "sink" in STRATEGIES[strategy].handles:
            yield pytest.param(strategy, method, layout_name, mode, id=f"{strategy}-{method}-{layout_name}-{mode}")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("strategy, method, layout_name, mode", sink_cases())
def test_the_sink_matches_the_reference(strategy, method, layout_name, mode, dtype, monkeypatch):
    """Forward and backward, the sink's own gradient included, against the reference's concatenated sink column
    (in float64; in float32 against the float64 reference, at float32's tolerance)."""
    if strategy == "triton":
        monkeypatch.setenv("TRITON_INTERPRET", "1")
    pe = make_pe(method, layout(layout_name)[0])
    needs_grad = mode == "gradients"
    sink = (2 * torch.randn(HEADS, dtype=torch.float64, generator=torch.Generator().manual_seed(3)))
    try:
        out, grads = run(pe.to(dtype), strategy, layout_name, needs_grad, sink.to(dtype).requires_grad_(needs_grad),
                         dtype)
    except StrategyCannotRun as refusal:
        pytest.skip(refusal.reason)
    expected, expected_grads = run(copy.deepcopy(pe).double(), None, layout_name, needs_grad,
                                   sink.requires_grad_(needs_grad))
    exact = dtype == torch.float64
    torch.testing.assert_close(out.double(), expected, atol=1e-7 if exact else 1e-5, rtol=1e-6 if exact else 1e-4,
                               msg=lambda m: f"output: {m}")
    assert len(grads) == len(expected_grads)
    for i, (got, want) in enumerate(zip(grads, expected_grads)):
        if want is None:
            assert got is None or not got.any(), f"gradient {i}: the reference has none"
            continue
        assert got is not None, f"gradient {i} is missing"
        loose = i >= 3 or not exact  # a parameter's gradient (through float32 tables), or float32 itself
        torch.testing.assert_close(got.double(), want, atol=1e-5 if loose else 1e-6, rtol=1e-4 if loose else 1e-5,
                                   msg=lambda m: f"gradient {i}: {m}")


def test_every_strategy_computes_some_method_here(monkeypatch):
    """Each strategy can run at least one (method, layout, mode) of the test above on this CPU, so none of
    them is only ever skipped; but a strategy for another device, which neither handles nor requires the
    `cpu` need (fla's CUDA kernels: tests/model/positional/test_fla_kernels.py runs their plumbing on CPU)."""
    from megatron.model.attention import AttentionInputs
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the `triton` kernel's only way to run on CPU
    never = {name for name, strategy in STRATEGIES.items() if "cpu" in strategy.handles | strategy.requires}
    for method in METHODS:
        for layout_name in LAYOUTS:
            window, documents, _ = layout(layout_name)
            pe = make_pe(method, window)
            positions = torch.arange(LENGTH)
            bias, weight = pe.distance_tables_at(positions, LENGTH) or (None, None)
            sinks = (False,) if "normaliser" in pe.channels else (False, True)  # True: the sink's test (a softmax's)
            for needs_grad, sink in itertools.product((False, True), sinks):
                described = AttentionInputs.describe(pe, positions, bias, weight, window=window, block_size=BLOCK,
                                                     needs_grad=needs_grad, dropout_p=0.0, dtype=torch.float64,
                                                     batch=2, documents=documents is not None, sink=sink)
                never -= {name for name in never if STRATEGIES[name].can_run(described) is None}
    assert not never, f"strategies that no method of this test runs: {sorted(never)}"


@pytest.mark.parametrize("window", [None, WINDOW])
@pytest.mark.parametrize("method", METHODS)
def test_the_cached_step_matches_the_reference(method, window):
    """The cached-generation strategy (cached.py): a prompt, one decoding step and the rest, each against
    the keys cached so far, give the reference's attention of the whole sequence."""
    from megatron.model.attention.cached import attend_cached, plan_cached
    from megatron.model.attention.written_out import at_tokens
    from megatron.model.kv_cache import KVCache
    pe = make_pe(method, window)
    q, k, v, x = inputs(pe, False)
    with torch.no_grad():
        values = pe.layer_values(x)
        cache = KVCache(num_layers=1, batch_size=2, capacity=LENGTH, windows=[window])
        outputs = []
        for start, end in ((0, 10), (10, 11), (11, LENGTH)):
            cache.append(None, end - start)
            plan = plan_cached(pe, cache, end - start, window).with_layer(
                {channel: at_tokens(value, start, end) for channel, value in values.items() if value is not None})
            outputs.append(attend_cached(q[:, :, start:end], k[:, :, start:end], v[:, :, start:end], plan,
                                         cache.layers[0]))
        expected = reference.attention(q, k, v, pe, torch.arange(LENGTH), window=window, **values)
    torch.testing.assert_close(torch.cat(outputs, dim=2), expected, atol=1e-7, rtol=1e-6)
