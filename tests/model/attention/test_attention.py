"""The three attention paths give one answer for every registered positional method.

Parametrised over the registry, so a new method gets every check. The reference is
megatron/model/attention/reference.py in float64."""
import itertools

import pytest
import torch

from torch.nn.attention.flex_attention import create_block_mask

from megatron.model.attention import flex_kernel
from megatron.model.attention import AttentionRun, attend, flex_block_mask, pad_to_whole_tiles, plan_attention
from megatron.model.attention.flex import MIN_CUDA_HEAD_DIM
from megatron.model.attention.needs import EVERY_STRATEGY
from megatron.model.attention.registry import STRATEGIES
from megatron.model.attention.sdpa import sdpa_bytes
from megatron.model.attention.choice import memory_budget_bytes
from megatron.model.positional_embeddings import available, build_positional_embedding
from megatron.neox_arguments import NeoXArgsError
from tests.support.attention import BLOCK, HEAD_DIM, HEADS, LENGTH, make_pe, reference_attention

METHODS = available()
# pope's logits reach 15 here (softplus magnitudes over 2D dims, where rotary's stay near 1): float32's rounding of
# its scores moves these outputs by up to 3.3e-6. Its paths agree to 5e-15 in float64 (test_strategies.py).
FLOAT32_ATOL = {"pope": 1e-5}


def qkv(requires_grad=False, dtype=torch.float32, head_dim=HEAD_DIM):
    torch.manual_seed(1)
    return [(2 * torch.randn(2, HEADS, LENGTH, head_dim)).to(dtype).requires_grad_(requires_grad) for _ in range(3)]


def flex_handles(pe) -> bool:
    """Whether the flex strategy handles every channel of `pe` (a softmax of q . k with the terms it lists)."""
    return pe.channels - EVERY_STRATEGY <= STRATEGIES["flex"].handles


def run_path(pe, impl, q, k, v, window=None, positions=None, needs_grad=False):
    positions = torch.arange(LENGTH) if positions is None else positions
    plan = plan_attention(pe, positions, AttentionRun(impl=impl, window=window, block_size=BLOCK, needs_grad=needs_grad,
                                                      dropout_p=0.0))
    assert plan.path == impl
    return attend(*plan.rotate(q, k), v, plan)


@pytest.mark.cpu_isa
@pytest.mark.parametrize("window", [None, 7])
@pytest.mark.parametrize("name", METHODS)
def test_every_path_matches_the_float64_reference(name, window):
    # The flex path's logic (score_mod over the tables, block mask, window, padding) on torch's eager
    # FlexAttention, right on every CPU; the compiled CPU kernel is checked by
    # tests/e2e/model/attention/test_attention.py.
    pe, (q, k, v) = make_pe(name), qkv()
    expected = reference_attention(pe, q, k, v, window)
    with torch.no_grad(), flex_kernel.reference_math():
        flex_runs = flex_handles(pe)
        for impl in ("sdpa", "blocked", "flex") if flex_runs else ("sdpa", "blocked"):
            out = run_path(pe, impl, q, k, v, window)
            torch.testing.assert_close(out.double(), expected, atol=FLOAT32_ATOL.get(name, 2e-6), rtol=1e-5,
                                       msg=f"path {impl}")


@pytest.mark.parametrize("length", [128, 300, 513])
def test_flex_block_mask_matches_torchs_create_block_mask(length):
    # Ours classifies 128 x 128 tiles from position ranges; torch's evaluates every pair.
    def tiles(block_mask, full):
        counts, indices = ((block_mask.full_kv_num_blocks, block_mask.full_kv_indices) if full
                           else (block_mask.kv_num_blocks, block_mask.kv_indices))
        return {(q, int(kv)) for q in range(counts.shape[-1]) for kv in indices[0, 0, q, :counts[0, 0, q]]}

    for offset, window in itertools.product((0, 77), (None, 1, 100, 129, 255, 256)):  # 255: a tile pair's farthest distance
        positions = torch.arange(length) + offset
        limit = length if window is None else window
        ours = flex_block_mask(positions, window, span=length)
        # The flex path runs on whole tiles: queries and keys padded with the last position.
        padded = torch.cat([positions, positions[-1].repeat(-length % 128)])
        expected = create_block_mask(lambda b, h, q, kv: (kv <= q) & (padded[q] - padded[kv] < limit),
                                     None, None, padded.shape[0], padded.shape[0], device="cpu")
        for full in (False, True):
            assert tiles(ours, full) == tiles(expected, full), (offset, window, full)


def test_flex_skips_and_fills_tiles_correctly_at_a_longer_length():
    # 256 tokens = two tiles; window 100 makes a skipped tile, a full one and masked ones.
    torch.manual_seed(1)
    pe, length = make_pe("kerple_log"), 256
    q, k, v = (torch.randn(1, HEADS, length, HEAD_DIM) for _ in range(3))
    positions = torch.arange(length)
    with torch.no_grad(), flex_kernel.reference_math():
        runs = [AttentionRun(impl=impl, window=100, block_size=BLOCK) for impl in ("sdpa", "flex")]
        outputs = [attend(q, k, v, plan_attention(pe, positions, run)) for run in runs]
    torch.testing.assert_close(outputs[1], outputs[0], atol=1e-6, rtol=1e-5)


def test_a_kernel_that_is_wrong_is_refused_and_a_right_one_is_checked_once():
    # The run-time check itself, on kernels whose numbers are known: torch's eager FlexAttention at
    # the wrong scale (a wrong kernel) and at the right one. No compilation.
    pe = make_pe("kerple_log")
    q, k, v = qkv()
    positions = torch.arange(LENGTH)
    plan = plan_attention(pe, positions, AttentionRun(impl="flex", window=None, block_size=BLOCK, needs_grad=False,
                                                      dropout_p=0.0))
    padded = [torch.nn.functional.pad(t, (0, 0, 0, 128 - LENGTH)) for t in (q, k, v)]
    table = pe.distance_tables(plan.span)[0]

    def score_mod(score, b, h, q_idx, kv_idx):
        return score + table[h, (q_idx - kv_idx).clamp(0, plan.span - 1)]

    calls = []

    def right(q, k, v, score_mod, block_mask):
        calls.append(1)
        return flex_kernel.eager_flex_attention(q, k, v, score_mod, block_mask)

    def wrong(q, k, v, score_mod, block_mask):
        return flex_kernel.eager_flex_attention(q * 1.5, k, v, score_mod, block_mask)

    with torch.no_grad():
        with pytest.raises(flex_kernel.FlexKernelError, match=r"gave wrong numbers at this shape \(batch 2, 4 heads, "
                           r"128 tokens in whole tiles, head dim 8, float32\).*'auto' or 'blocked'"):
            flex_kernel.run_flex(*padded, score_mod, plan.block_mask, kernel=wrong)
        with pytest.raises(flex_kernel.FlexKernelError):  # refused every time, not only the first
            flex_kernel.run_flex(*padded, score_mod, plan.block_mask, kernel=wrong)
        first = flex_kernel.run_flex(*padded, score_mod, plan.block_mask, kernel=right)
        second = flex_kernel.run_flex(*padded, score_mod, plan.block_mask, kernel=right)
    assert torch.equal(first, second) and len(calls) == 2  # the reference ran beside the first call only


def test_flex_kernel_sees_only_whole_tiles():
    # The guard itself: whatever the length, the compiled kernel is given whole 128-token tiles.
    for length in (1, 8, 40, 127, 128, 129, 1000):
        positions = torch.arange(length) + 5
        padded = pad_to_whole_tiles(positions)
        assert padded.shape[0] % 128 == 0 and padded.shape[0] - length < 128
        assert torch.equal(padded[:length], positions) and bool((padded[length:] == positions[-1]).all())
        assert flex_block_mask(positions, None, span=length).seq_lengths == (padded.shape[0],) * 2


@pytest.mark.parametrize("name", METHODS)
def test_paths_agree_for_shifted_positions(name):
    # Evaluation windows start at any position: terms must depend on the positions passed in.
    pe, (q, k, v) = make_pe(name), qkv()
    positions = torch.arange(LENGTH) + 100
    with torch.no_grad():
        expected = run_path(pe, "sdpa", q, k, v, 5, positions)
        torch.testing.assert_close(run_path(pe, "blocked", q, k, v, 5, positions), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("name", METHODS)
def test_sdpa_and_blocked_gradients_agree(name):
    pe = make_pe(name)
    grads = {}
    for impl in ("sdpa", "blocked"):
        pe.zero_grad()
        q, k, v = qkv(requires_grad=True)
        out = run_path(pe, impl, q, k, v, window=9, needs_grad=True)
        (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        grads[impl] = {"q": q.grad, "k": k.grad, "v": v.grad} | {n: p.grad for n, p in pe.named_parameters()}
    has_terms = pe.bias(2, 2) is not None or pe.weight(2, 2) is not None
    for key, expected in grads["sdpa"].items():
        if key in ("q", "k", "v") or has_terms:  # parameters of absolute methods live outside attention
            assert expected is not None and expected.abs().sum() > 0, f"no gradient reached {key}"
            torch.testing.assert_close(grads["blocked"][key], expected, atol=1e-5, rtol=1e-5, msg=f"gradient of {key}")


def test_blocked_path_saves_no_length_squared_tensor_for_backward():
    # The blocked path recomputes each block in backward (or, for a learnable bias table, keeps only
    # q, k, v views and the output: table_gradient.py): nothing of size H * L * L is kept.
    # kerple_bias_weight's sdpa path (written-out softmax) shows that the measure sees an H * L * L.
    largest = {}
    for name, impl in (("kerple_bias_weight", "sdpa"), ("kerple_log", "sdpa"), ("kerple_log", "blocked"),
                       ("kerple_bias_weight", "blocked")):
        pe, (q, k, v) = make_pe(name), qkv(requires_grad=True)
        sizes = []
        with torch.autograd.graph.saved_tensors_hooks(lambda t: sizes.append(t.numel()) or t, lambda t: t):
            run_path(pe, impl, q, k, v, needs_grad=True).sum().backward()
        largest[name, impl] = max(sizes)
    assert largest["kerple_bias_weight", "sdpa"] >= HEADS * LENGTH * LENGTH
    assert largest["kerple_log", "sdpa"] < HEADS * LENGTH * LENGTH  # the bias is a constant to SDPA
    for name in ("kerple_log", "kerple_bias_weight"):
        assert largest[name, "blocked"] <= 2 * HEADS * LENGTH * HEAD_DIM  # q, k, v themselves


@pytest.mark.cpu_isa
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_paths_agree_with_fp32(dtype):
    pe = make_pe("kerple_bias_weight")  # bias and multiplicative weight: both code paths
    q, k, v = qkv(dtype=dtype)
    expected = reference_attention(pe, q.float(), k.float(), v.float(), window=11)
    with torch.no_grad(), flex_kernel.reference_math():
        for impl in ("sdpa", "blocked", "flex"):
            out = run_path(pe, impl, q, k, v, window=11)
            assert out.dtype == dtype
            torch.testing.assert_close(out.double(), expected, atol=3e-2, rtol=3e-2, msg=f"path {impl}")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="FlexAttention backward needs CUDA (no CPU backward in torch)")
# Not fire (no flex backward through its terms), nor the methods FlexAttention's per-entry score_mod cannot
# express: a score rewrite (cope), a replaced softmax (stickbreaking), transformed keys (path), decayed dot
# products (wall); their refusals are test_flex_refuses_what_it_cannot_do's.
@pytest.mark.parametrize("name", [n for n in METHODS if flex_handles(make_pe(n))])
def test_flex_gradients_match_sdpa_on_cuda(name):
    pe = make_pe(name, head_dim=MIN_CUDA_HEAD_DIM).cuda()  # CUDA FlexAttention compiles no smaller head
    grads = {}
    for impl in ("sdpa", "flex"):
        pe.zero_grad()
        q, k, v = (t.detach().cuda().requires_grad_() for t in qkv(head_dim=MIN_CUDA_HEAD_DIM))
        positions = torch.arange(LENGTH, device="cuda")
        out = run_path(pe, impl, q, k, v, window=9, positions=positions, needs_grad=True)
        (out * torch.linspace(-1, 1, out.numel(), device="cuda").view_as(out)).sum().backward()
        grads[impl] = {"q": q.grad, "k": k.grad, "v": v.grad} | {n: p.grad for n, p in pe.named_parameters()}
    for key, expected in grads["sdpa"].items():
        torch.testing.assert_close(grads["flex"][key], expected, atol=1e-4, rtol=1e-4, msg=f"gradient of {key}")


def test_flex_refuses_what_it_cannot_do():
    q, k, v = qkv()
    positions = torch.arange(LENGTH)
    with pytest.raises(NeoXArgsError, match="no backward pass on CPU.*'blocked' or 'auto'"):
        plan_attention(make_pe("alibi"), positions, AttentionRun(impl="flex", window=None, block_size=BLOCK,
                                                                 needs_grad=True, dropout_p=0.0))
    non_distance = [n for n in METHODS if "query_terms" in make_pe(n).channels]
    past_thresholds = positions + 1000  # fire's terms read i only past its threshold L = 512
    for name in non_distance:
        reason = "rewrites the whole score matrix" if ("score_rewrite" in make_pe(name).channels) else "depends on the query position itself"
        with pytest.raises(NeoXArgsError, match=reason):
            plan_attention(make_pe(name), past_thresholds, AttentionRun(impl="flex", window=None, block_size=BLOCK,
                                                                        needs_grad=False, dropout_p=0.0))
    with pytest.raises(NeoXArgsError, match="attention-impl is 'fast'; choose one of auto, sdpa, flex, blocked"):
        plan_attention(make_pe("alibi"), positions, AttentionRun(impl="fast", window=None, block_size=BLOCK,
                                                                 needs_grad=False, dropout_p=0.0))
    with pytest.raises(NeoXArgsError, match="attention-window is 0"):
        plan_attention(make_pe("alibi"), positions, AttentionRun(impl="sdpa", window=0, block_size=BLOCK,
                                                                 needs_grad=False, dropout_p=0.0))


# auto's decisions for every kind of method, device, gradient, dropout, window and budget:
# tests/model/attention/test_attention_choice.py.


def test_auto_on_cpu_never_takes_flex_at_any_length():
    for name in ("kerple_log", "alibi", "t5", "none", "kerple_bias_weight"):
        pe = make_pe(name)
        for length in (8, 512, 4096, 16384):
            with torch.no_grad():
                plan = plan_attention(pe, torch.arange(length), AttentionRun(impl="auto", window=length // 2,
                                                                             block_size=BLOCK, needs_grad=False,
                                                                             dropout_p=0.0, memory_budget_mb=1))
            assert plan.path != "flex", (name, length)
            if ("query_terms" not in pe.channels) and name != "kerple_bias_weight":
                assert plan.name == "toeplitz", (name, length)  # one strided row per head


def test_auto_follows_the_memory_estimate():
    # fire training past its threshold (terms that read i: pe.pairwise), 4 heads, fp32, one sequence, per
    # (query, key) pair: the mask 4 * 4; pairwise with gradients 4 * (2 * 32 + 4 + 8), visibility 17 and the
    # copy the mask is masked from 4 * 4; the mask needs a gradient, so three fp32 scores 3 * 4 * 4: 401.
    pe = make_pe("fire")

    def path(length, budget_mb):
        positions = torch.arange(length) + 1000  # past the threshold L = 512
        return plan_attention(pe, positions, AttentionRun(impl="auto", window=None, block_size=BLOCK, needs_grad=True,
                                                          dropout_p=0.0, memory_budget_mb=budget_mb)).path
    assert path(51, 1) == "sdpa"       # 51^2 * 401 = 1,043,001 bytes <= 1 MiB
    assert path(52, 1) == "blocked"    # 52^2 * 401 = 1,084,304 bytes
    assert path(LENGTH, None) == "sdpa"  # the CPU default at a short length
    assert memory_budget_bytes(torch.device("cpu"), None) == 2**30


def test_sdpa_estimate_by_hand():
    # A bias method in bf16 with a table gradient: the mask, 2 * 8 = 16 bytes a pair.
    assert sdpa_bytes(length=1000, heads=8, batch=4, element_size=2, pairwise_bytes=0, writes_scores=False,
                      needs_grad=True) == 1000 * 1000 * 16
    # kerple_bias_weight in fp32, training at batch 4: pairwise's int64 distance and fp32 bias and weight
    # (8 + 8 * 8), visibility 17, mask-sized terms twice (2 * 4 * 8), three [4, 8, L, L] fp32 scores at once.
    assert make_pe("kerple_bias_weight").pairwise_bytes(False) == 8 + 8 * HEADS
    assert sdpa_bytes(length=512, heads=8, batch=4, element_size=4, pairwise_bytes=72, writes_scores=True,
                      needs_grad=True) == 512 * 512 * (72 + 17 + 64 + 4 * 8 * 4 * 3)
    # float64 scores are 8 bytes; without gradients two are alive at once.
    assert sdpa_bytes(length=10, heads=2, batch=1, element_size=8, pairwise_bytes=24, writes_scores=True,
                      needs_grad=False) == 100 * (24 + 17 + 32 + 2 * 8 * 2)


def test_sdpa_mask_is_built_once_in_the_compute_dtype():
    # The plan holds the final 4-D contiguous mask: layers hand it to SDPA as it is.
    for dtype in (torch.float32, torch.bfloat16):
        plan = plan_attention(make_pe("alibi"), torch.arange(LENGTH),
                              AttentionRun(impl="sdpa", window=7, block_size=BLOCK, needs_grad=False, dropout_p=0.0,
                                           dtype=dtype))
        assert plan.mask.dtype == dtype and plan.mask.shape == (1, HEADS, LENGTH, LENGTH) and plan.mask.is_contiguous()
        assert plan.name == "sdpa"  # not the written-out softmax


@pytest.mark.slow
@pytest.mark.parametrize("window", [None, 300])
def test_paths_agree_at_a_realistic_size(window):
    # 12 heads of 64 dims, 1100 tokens (ragged last tile and block), forward and gradients.
    heads, head_dim, length = 12, 64, 1100
    positions = torch.arange(length)
    for name in ("kerple_bias_weight", "t5", "mep_kerple", "fire"):
        torch.manual_seed(0)
        pe = build_positional_embedding(name, num_heads=heads, head_dim=head_dim)
        q, k, v = (torch.randn(1, heads, length, head_dim) for _ in range(3))
        outputs, grads = {}, {}
        flex_runs = flex_handles(pe)
        for impl in ("sdpa", "blocked", "flex") if flex_runs else ("sdpa", "blocked"):
            needs_grad = impl != "flex"
            pe.zero_grad()
            inputs = [t.clone().requires_grad_(needs_grad) for t in (q, k, v)]
            with torch.set_grad_enabled(needs_grad):
                plan = plan_attention(pe, positions, AttentionRun(impl=impl, window=window, block_size=256,
                                                                  needs_grad=needs_grad, dropout_p=0.0))
                outputs[impl] = attend(*inputs, plan)
            if needs_grad:
                outputs[impl].square().sum().backward()
                grads[impl] = [t.grad for t in inputs] + [p.grad for p in pe.parameters()]
        for impl, out in outputs.items():
            torch.testing.assert_close(out, outputs["sdpa"], atol=1e-5, rtol=1e-5, msg=f"{name} {impl}")
        for blocked, expected in zip(grads["blocked"], grads["sdpa"]):
            torch.testing.assert_close(blocked, expected, atol=1e-4, rtol=1e-4, msg=f"{name} gradients")


@pytest.mark.parametrize("window", [None, 1, 7, LENGTH + 5])
def test_toeplitz_mask_equals_the_gathered_one(window):
    # distance_mask builds consecutive positions' mask from one row per head; any other positions gather.
    from megatron.model.attention import additive_mask, allowed_keys, distance_mask, gather_by_distance
    table = make_pe("kerple_log").distance_tables(LENGTH)[0]
    for positions in (torch.arange(LENGTH), torch.arange(LENGTH) + 100):
        allowed = allowed_keys(positions, positions, torch.arange(LENGTH), window)
        gathered = additive_mask(gather_by_distance(table, positions - positions[0], positions - positions[0]),
                                 allowed, torch.float32)
        mask = distance_mask(table, positions, window, torch.float32)
        assert mask.shape == (1, HEADS, LENGTH, LENGTH) and mask.is_contiguous()
        assert torch.equal(mask, gathered)
    no_terms = distance_mask(None, torch.arange(LENGTH), window, torch.bfloat16)
    assert no_terms.shape == (1, 1, LENGTH, LENGTH) and no_terms.dtype == torch.bfloat16


@pytest.mark.parametrize("name", ["kerple_log", "alibi", "t5"])
def test_sdpa_with_positions_that_are_not_consecutive(name):
    # Explicit position_ids with gaps take the gathered mask; blocked gathers block by block.
    pe, (q, k, v) = make_pe(name), qkv()
    positions = torch.arange(LENGTH) * 3 + torch.arange(LENGTH) % 2
    with torch.no_grad():
        expected = run_path(pe, "blocked", q, k, v, 20, positions)
        torch.testing.assert_close(run_path(pe, "sdpa", q, k, v, 20, positions), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("window", [None, 100])
@pytest.mark.parametrize("name", ["kerple_log", "alibi", "none"])
def test_toeplitz_blocks_match_sdpa_across_blocks(name, window):
    # 300 tokens: two whole 128-query blocks and a partial one (toeplitz.py), with gradients:
    # the table gradient for kerple_log, autograd through the kernel for alibi, a window alone for none.
    from megatron.model.attention import TOEPLITZ_BLOCK
    length, positions = 300, torch.arange(300) + 7
    assert length > 2 * TOEPLITZ_BLOCK and length % TOEPLITZ_BLOCK
    pe = make_pe(name)
    torch.manual_seed(3)
    inputs = [torch.randn(2, HEADS, length, HEAD_DIM) for _ in range(3)]
    probe = torch.randn(2, HEADS, length, HEAD_DIM)
    results = {}
    for impl in ("sdpa", "blocked"):
        pe.zero_grad()
        q, k, v = (t.clone().requires_grad_() for t in inputs)
        plan = plan_attention(pe, positions, AttentionRun(impl=impl, window=window, block_size=BLOCK, needs_grad=True,
                                                          dropout_p=0.0))
        assert plan.name.startswith("toeplitz") == (impl == "blocked")
        out = attend(q, k, v, plan)
        (out * probe).sum().backward()
        results[impl] = [out, q.grad, k.grad, v.grad] + [p.grad for p in pe.parameters()]
    for got, expected in zip(results["blocked"], results["sdpa"]):
        torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
