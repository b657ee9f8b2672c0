"""`attention-temperature` (positional_embeddings/temperature.py) against a float64 attention written
here from the formula logits_h(i, j) = t_h(i) * (q_i . k_j / sqrt(D) + bias_h(i - j)), t = s_h ln(n_i)
(ssmax, n_i the keys query i sees) or s_h (head_scale), on every attention path; its scale learns; the
KV cache, the checkpoint's model config and the Hugging Face export carry it."""
import math

import pytest
import torch
from tests.support.hf_export import tiny_config

from megatron.errors import NeoXArgsError
from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.model.attention import AttentionRun, attend, plan_attention
from megatron.model.attention.flex_kernel import reference_math
from megatron.model.model_config import differences
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.model.positional_embeddings.temperature import Tempered
from megatron.neox_arguments import NeoXArgs
from megatron.tokenizer import build_tokenizer

H, D, L = 4, 16, 96


def reference(q, k, v, kind, s, r1=None, r2=None, window=None):
    """float64 causal attention with the temperature and (when r1, r2 given) KERPLE-log's bias."""
    q, k, v = (t.double() for t in (q, k, v))
    i = torch.arange(L, dtype=torch.float64)[:, None]
    j = torch.arange(L, dtype=torch.float64)[None, :]
    d = (i - j).clamp(min=0)
    logits = q @ k.transpose(-1, -2) / math.sqrt(D)
    if r1 is not None:
        logits = logits - r1.double()[:, None, None] * torch.log1p(r2.double()[:, None, None] * d)
    seen = (i + 1) if window is None else (i + 1).clamp(max=window)
    t = s.double()[:, None, None] * (seen.log() if kind == "ssmax" else torch.ones_like(seen))  # [H, L, 1]
    logits = logits * t
    visible = (j <= i) if window is None else (j <= i) & (i - j < window)
    logits = logits.masked_fill(~visible, float("-inf"))
    return logits.softmax(-1) @ v


@pytest.mark.parametrize("impl", ["sdpa", "blocked", "flex"])
@pytest.mark.parametrize("method", ["kerple_log", "rotary", "none"])
@pytest.mark.parametrize("kind", ["ssmax", "head_scale"])
def test_every_path_equals_the_float64_formula(kind, method, impl):
    torch.manual_seed(0)
    window = 40 if method == "none" else None
    base = build_positional_embedding(method, num_heads=H, head_dim=D, hidden_size=H * D, max_position_embeddings=32)
    pe = Tempered(base, {"type": kind})
    with torch.no_grad():
        pe.temperature_scale.copy_(torch.rand(H) + 0.5)
    q, k, v = (torch.randn(1, H, L, D) for _ in range(3))
    positions = torch.arange(L)
    if impl == "flex" and "query_terms" in pe.channels:  # ssmax times a bias: no per-distance table to read
        with pytest.raises(NeoXArgsError, match=r"attention-impl is 'flex', but this positional method's bias "
                                                r"depends on the query position itself"):
            plan_attention(pe, positions, AttentionRun(impl=impl, window=window, block_size=32, needs_grad=False,
                                                       dropout_p=0.0))
        return
    plan = plan_attention(pe, positions, AttentionRun(impl=impl, window=window, block_size=32, needs_grad=False,
                                                      dropout_p=0.0))
    with torch.no_grad(), reference_math():
        ours = attend(*plan.rotate(q, k), v, plan)
        if method == "rotary":  # rotary's own rotation (tested against transformers elsewhere), then the formula
            q, k = base.rotate_qk(q, k, positions, positions)
    params = base.kernel_parameters()
    expected = reference(q, k, v, kind, pe.temperature_scale.detach(), params.get("r1"), params.get("r2"), window)
    torch.testing.assert_close(ours.double(), expected, atol=2e-5, rtol=0)
    if kind == "ssmax" and method == "kerple_log":
        assert "query_terms" in pe.channels  # a bias times t(i): built pairwise
    else:
        assert ("query_terms" not in pe.channels)  # no per-query term outside q: the table paths stay open


def test_the_scale_learns_on_the_blocked_path():
    base = build_positional_embedding("alibi", num_heads=H, head_dim=D, hidden_size=H * D, max_position_embeddings=32)
    pe = Tempered(base, {"type": "ssmax"})
    q, k, v = (torch.randn(1, H, L, D, requires_grad=True) for _ in range(3))
    positions = torch.arange(L)
    plan = plan_attention(pe, positions, AttentionRun(impl="blocked", window=None, block_size=32, needs_grad=True,
                                                      dropout_p=0.0))
    attend(*plan.rotate(q, k), v, plan).square().sum().backward()
    assert pe.temperature_scale.grad is not None and pe.temperature_scale.grad.abs().sum() > 0


def test_ssmax_starts_at_the_plain_softmax_at_the_training_length():
    base = build_positional_embedding("none", num_heads=H, head_dim=D, hidden_size=H * D, max_position_embeddings=64)
    t = Tempered(base, {"type": "ssmax"}).query_scale(torch.tensor([[64]]))
    torch.testing.assert_close(t, torch.ones(1, H, 1))


def model_with(temperature, method="kerple_log", seed=0):
    args = NeoXArgs.from_dict(tiny_config(method) | {"attention_temperature": temperature})
    torch.manual_seed(seed)
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size)).eval()
    with torch.no_grad():
        for pe in model.positional_embeddings():
            for p in pe.parameters():
                p.add_(0.3 * torch.rand_like(p))
    return args, model


def test_the_checkpoint_records_the_temperature():
    args, model = model_with({"type": "ssmax"})
    saved = model_config(args, model.vocab_size)
    _, plain = model_with(None)
    plain_args = NeoXArgs.from_dict(tiny_config("kerple_log"))
    assert differences(saved, model_config(plain_args, plain.vocab_size)) == [
        "attention-temperature: checkpoint {'type': 'ssmax'}, this run None"]


@pytest.mark.parametrize("value,message", [
    ({"type": "x"}, r"attention-temperature: type is 'x'; choose one of \['ssmax', 'head_scale', 'llama4'\]"),
    ({"type": "ssmax", "init": 0}, r"attention-temperature: init must be a positive number"),
    ({"type": "ssmax", "slope": 1}, r"attention-temperature: unknown key\(s\) \['slope'\]"),
])
def test_a_bad_temperature_is_one_paragraph(value, message):
    with pytest.raises(NeoXArgsError, match=message):
        NeoXArgs.from_dict(tiny_config("alibi") | {"attention_temperature": value})


def test_results_of_each_switch_never_share_the_plain_methods_row():
    from megatron.evaluation.identity import evaluation_variant
    plain = tiny_config("rotary")
    variants = [evaluation_variant(NeoXArgs.from_dict(plain | extra)) for extra in (
        {}, {"attention_temperature": {"type": "ssmax"}}, {"attention_temperature": {"type": "ssmax", "init": 0.5}},
        {"attention_temperature": {"type": "head_scale"}}, {"random_positions": 64},
        {"layer_pattern": [{}, {"pos-emb": "none"}]})]
    assert variants[0] is None and len(set(variants)) == len(variants)
    assert variants[1] == "ssmax" and variants[4] == "randpos64" and variants[5].startswith("layers-")
