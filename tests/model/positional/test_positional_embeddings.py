"""The positional registry against independent references: the spec's test vectors, Hugging Face
`transformers` (BLOOM ALiBi, T5 buckets, GPT-NeoX rotary) and float64 formulas written here."""
import math
from dataclasses import dataclass

import pytest
import torch
from transformers import GPTNeoXConfig
from transformers.models.bloom.modeling_bloom import build_alibi_tensor
from transformers.models.gpt_neox.modeling_gpt_neox import GPTNeoXRotaryEmbedding, apply_rotary_pos_emb
from transformers.models.t5.modeling_t5 import T5Attention

from megatron.model.positional_embeddings import (LISTING_ORDER, PositionalEmbedding, PositionalEmbeddingError,
                                                  available, build_positional_embedding, checkpoint_options,
                                                  option, option_names, register)
from megatron.model.positional_embeddings.registry import OPTIONS, REGISTRY
from megatron.model.positional_embeddings.temperature import Tempered
from megatron.errors import NeoXArgsError
from megatron.neox_arguments import POS_EMB_ALIASES, NeoXArgs
from megatron.neox_arguments.to_model import positional_embedding

H, D, HIDDEN = 4, 16, 64
KERPLE = ("kerple_log", "kerple_power", "kerple_log3", "kerple_bias_weight")
EXPONENTS = {"kerple_power": ["r2"], "kerple_log3": ["r3"], "kerple_bias_weight": ["r2", "r4"]}


def build(name, num_heads=H, **options):
    if name == "learned":
        options.setdefault("max_position_embeddings", 32)
    torch.manual_seed(0)
    return build_positional_embedding(name, num_heads=num_heads, head_dim=D, hidden_size=HIDDEN, **options)


def bias_methods():
    return [n for n in available() if build(n).bias(2, 2) is not None]


def hf_t5_bucket(d: torch.Tensor) -> torch.Tensor:
    # transformers' relative_position is key - query; causal means bidirectional=False.
    return T5Attention._relative_position_bucket(-d, bidirectional=False, num_buckets=32, max_distance=128)


# ---------------------------------------------------------------- registry
def test_the_config_accepts_every_registered_method_and_lists_them_in_order_when_refusing():
    assert set(LISTING_ORDER) <= set(REGISTRY), "LISTING_ORDER names a method nobody registers"
    base = {"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 16,
            "train_micro_batch_size_per_gpu": 1, "tokenizer_type": "ByteLevelTokenizer", "max_position_embeddings": 64}
    for name in ("kerple_log", "alibi", "sandwich", "xpos", "rpe"):
        assert NeoXArgs.from_dict(base | {"pos_emb": name}).pos_emb == POS_EMB_ALIASES.get(name, name)
    with pytest.raises(NeoXArgsError, match=r"unknown positional method 'no_such_method'") as refused:
        NeoXArgs.from_dict(base | {"pos_emb": "no_such_method"})
    listed = [name for name in REGISTRY if name in str(refused.value)]
    order = sorted(listed, key=lambda name: str(refused.value).index(f" {name}"))
    assert order[:len(LISTING_ORDER)] == list(LISTING_ORDER)  # the paper's order first


def test_an_option_declared_twice_differently_is_refused():
    with pytest.raises(PositionalEmbeddingError, match=r"declares option rpe_num_buckets \(default 16\), which "
                       r"pos-emb 't5' already declares differently \(default 32\)"):
        @register("buckets_again")
        class BucketsAgain(PositionalEmbedding):
            @dataclass
            class Options:
                rpe_num_buckets: int = option(16, "Fewer buckets.")
    assert "buckets_again" not in REGISTRY and OPTIONS["rpe_num_buckets"].default == 32


def test_an_option_must_be_declared_with_option():
    with pytest.raises(PositionalEmbeddingError, match=r"option width of \S*Plain.Options is a plain field; declare "
                       r"it with option\(default, help, ...\)"):
        @register("plain")
        class Plain(PositionalEmbedding):
            @dataclass
            class Options:
                width: int = 3
    assert "plain" not in REGISTRY


def test_a_shared_option_is_one_declaration():
    # mep_kerple's kernels reuse t5's and KERPLE's keys by inheriting their declarations.
    assert {"rpe_num_buckets", "rpe_max_distance", "kerple_eps"} <= set(option_names("mep_kerple"))
    assert "kerple_init" not in option_names("mep_kerple") and option_names("mep") == ()
    assert OPTIONS["kerple_eps"].owner == "kerple_log"


def test_initialisation_only_options_are_declared_as_such():
    assert checkpoint_options("kerple_log") == ("kerple_eps",)  # not kerple_init
    assert checkpoint_options("fire") == ("fire_mlp_width", "fire_init_L")  # L = fire_init_L x a learned factor
    assert checkpoint_options("learned") == ("max_position_embeddings",)  # its table's rows


def test_aliases_build_the_canonical_method():
    # The KERPLE fork's and upstream NeoX's spellings.
    assert build("kerple_power_ap_").name == "kerple_power" and build("rpe").name == "t5"


def test_duplicate_registration_is_refused():
    with pytest.raises(PositionalEmbeddingError, match="'alibi' is registered twice"):
        @register("alibi")
        class Another(PositionalEmbedding):
            pass
    assert build("alibi").__class__.__name__ == "ALiBi"


def test_unknown_name_lists_the_valid_names():
    with pytest.raises(PositionalEmbeddingError, match="unknown positional embedding 'kerple'.*Valid names: "
                       "kerple_log, kerple_power, kerple_log3, kerple_bias_weight, alibi, t5, rotary"):
        build("kerple")


def test_unknown_option_lists_the_accepted_ones():
    with pytest.raises(PositionalEmbeddingError, match="unknown option.*kerple_epsilon; it accepts: kerple_eps"):
        build("kerple_log", kerple_epsilon=0.1)


@pytest.mark.parametrize("name", available())
def test_build_from_config(name):
    args = NeoXArgs.from_dict({"num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "seq_length": 32,
                               "train_micro_batch_size_per_gpu": 1,
                               "pos_emb": name, "kerple_eps": 0.05, "rotary_pct": 0.5, "rpe_num_buckets": 16})
    pe = positional_embedding(args)
    assert (pe.name, pe.num_heads, pe.head_dim) == (name, 4, 16)
    if name != "cable":  # its offset c_h is unconstrained (it starts at 0, as the released code's)
        assert all(v.min() >= 0.05 for v in pe.kernel_parameters().values())
    if name == "learned":
        assert pe.max_length == 32
    if name == "rotary":
        assert pe.rotary_dims == 8
    if name == "t5":
        assert pe.table.shape == (16, 4)


# ---------------------------------------------------------------- ALiBi
SPEC_SLOPES = {
    8: [2.0 ** -k for k in range(1, 9)],
    12: [2.0 ** -k for k in range(1, 9)] + [0.70711, 0.35355, 0.17678, 0.08839],
    6: [0.25, 0.0625, 0.015625, 0.00390625, 0.5, 0.125],
}


@pytest.mark.parametrize("heads", sorted(SPEC_SLOPES))
def test_alibi_slopes_match_the_spec_vectors(heads):
    row = build("alibi", num_heads=heads).bias(1, 2)[:, 0, 0]  # d = 1: -m_h
    torch.testing.assert_close(-row, torch.tensor(SPEC_SLOPES[heads]), atol=5e-6, rtol=0)


@pytest.mark.parametrize("heads", [1, 3, 5, 6, 8, 12, 16, 20, 24, 32])
def test_alibi_matches_bloom(heads):
    length = 40
    bloom = build_alibi_tensor(torch.ones(1, length), heads, torch.float32)[:, 0, :]  # m_h * j, [H, L]
    ours = build("alibi", num_heads=heads).bias(1, length)[:, 0, :]                 # -m_h (L - 1 - j)
    # Equal up to a per-head constant, which the softmax ignores.
    torch.testing.assert_close(ours - ours[:, -1:], bloom - bloom[:, -1:])


def test_alibi_distances_are_not_rounded():
    bias, _ = build("alibi").distance_tables(4000)
    slopes = -bias[:, 1]
    torch.testing.assert_close(bias[:, 3001] - bias[:, 3000], -slopes)  # bf16 distances would give 0


# ---------------------------------------------------------------- T5
def test_t5_buckets_match_transformers():
    from megatron.model.positional_embeddings.t5 import causal_buckets
    d = torch.arange(20000)
    buckets = causal_buckets(d, 32, 128)
    assert torch.equal(buckets, hf_t5_bucket(d))
    assert int(d[buckets == 31].min()) == 113  # the spec: bucket 31 starts at n = 113


def test_t5_bias_is_the_scaled_table_entry():
    pe = build("t5")
    q = torch.arange(300, 340)
    k = torch.arange(0, 340)
    bias, weight = pe.pairwise(q, k)
    d = (q[:, None] - k[None, :]).clamp(min=0)
    expected = pe.table.detach().double()[hf_t5_bucket(d)].permute(2, 0, 1) * math.sqrt(D)
    assert weight is None
    torch.testing.assert_close(bias.double(), expected)
    assert pe.table.shape == (32, H)


# ---------------------------------------------------------------- rotary
def rotate_float64(x, positions, rotary_dims, base=10000):
    """Each pair (x_p, x_{p + R/2}) as a complex number, turned by positions * base^(-2p/R)."""
    half = rotary_dims // 2
    x = x.double()
    angles = positions.double()[:, None] * base ** (-2.0 * torch.arange(half).double() / rotary_dims)
    z = torch.complex(x[..., :half], x[..., half:rotary_dims]) * torch.polar(torch.ones_like(angles), angles)
    return torch.cat([z.real, z.imag, x[..., rotary_dims:]], dim=-1)


def test_rotary_matches_float64_formula_with_partial_rotation():
    pe = build("rotary", rotary_pct=0.25)
    q, k = torch.randn(2, H, 7, D), torch.randn(2, H, 9, D)
    q_pos, k_pos = torch.arange(1000, 1007), torch.arange(998, 1007)
    q_rot, k_rot = pe.rotate_qk(q, k, q_pos, k_pos)
    torch.testing.assert_close(q_rot.double(), rotate_float64(q, q_pos, 4), atol=2e-5, rtol=1e-5)
    torch.testing.assert_close(k_rot.double(), rotate_float64(k, k_pos, 4), atol=2e-5, rtol=1e-5)
    assert torch.equal(q_rot[..., 4:], q[..., 4:])


def test_rotary_matches_transformers_gpt_neox():
    pe = build("rotary", rotary_pct=0.5, rotary_emb_base=500)
    config = GPTNeoXConfig(hidden_size=H * D, num_attention_heads=H, rotary_pct=0.5, rotary_emb_base=500)
    q, k = torch.randn(1, H, 12, D), torch.randn(1, H, 12, D)
    positions = torch.arange(50, 62)
    cos, sin = GPTNeoXRotaryEmbedding(config)(q, positions[None])
    expected = apply_rotary_pos_emb(q, k, cos, sin)
    for ours, theirs in zip(pe.rotate_qk(q, k, positions, positions), expected):
        torch.testing.assert_close(ours, theirs)


def test_rotary_scores_depend_only_on_distance():
    pe = build("rotary", rotary_pct=0.5)
    q, k = torch.randn(1, H, 1, D), torch.randn(1, H, 1, D)
    scores = [(lambda a, b: (a * b).sum())(*pe.rotate_qk(q, k, torch.tensor([i]), torch.tensor([i - 5])))
              for i in (5, 77, 1234)]
    torch.testing.assert_close(torch.stack(scores), scores[0].expand(3), atol=1e-4, rtol=1e-5)


def test_rotary_pct_must_give_an_even_number_of_dims():
    with pytest.raises(PositionalEmbeddingError, match="rotary-pct=0.1 of head dim 16 gives 1 rotated dims"):
        build("rotary", rotary_pct=0.1)


# ---------------------------------------------------------------- absolute methods
def test_sinusoidal_matches_float64_formula():
    pe = build("sinusoidal")
    positions = torch.arange(100, 140)
    out = pe.add_to_embeddings(torch.zeros(2, 40, HIDDEN), positions)
    k = torch.arange(HIDDEN // 2).double()
    angle = positions.double()[:, None] / 10000 ** (2 * k / HIDDEN)
    torch.testing.assert_close(out.double(), torch.cat([angle.sin(), angle.cos()], -1).expand(2, -1, -1),
                               atol=2e-5, rtol=0)


def test_learned_embeds_up_to_its_length_and_fails_clearly_beyond():
    pe = build("learned", max_position_embeddings=32)
    x = torch.zeros(1, 32, HIDDEN)
    torch.testing.assert_close(pe.add_to_embeddings(x, torch.arange(32))[0], pe.embedding.weight)
    with pytest.raises(PositionalEmbeddingError, match=r"'learned' can only embed positions < "
                       r"max-position-embeddings=32; got position 511 .*kerple_log extrapolate; learned cannot"):
        pe.add_to_embeddings(torch.zeros(1, 512, HIDDEN), torch.arange(512))


# ---------------------------------------------------------------- KERPLE and MEP vs float64 formulas
def kerple_float64(name, p, d):
    p = {k: v.detach().double()[:, None] for k, v in p.items()}
    if name == "kerple_log":
        return -p["r1"] * torch.log(1 + p["r2"] * d), None
    if name == "kerple_power":
        return -p["r1"] * d ** p["r2"], None
    if name == "kerple_log3":
        return -p["r1"] * torch.log(1 + p["r2"] * d ** p["r3"]), None
    return -p["r1"] * d ** p["r2"], torch.exp(-p["r3"] * d ** p["r4"])


@pytest.mark.parametrize("name", KERPLE)
def test_kerple_matches_float64_formula(name):
    pe = build(name)
    d = torch.arange(4096).double()
    expected_bias, expected_weight = kerple_float64(name, pe.kernel_parameters(), d)
    bias, weight = pe.distance_tables(4096)
    assert bias.dtype == torch.float32
    torch.testing.assert_close(bias.double(), expected_bias, rtol=2e-5, atol=1e-5)
    if expected_weight is None:
        assert weight is None and pe.weight(3, 5) is None
    else:
        torch.testing.assert_close(weight.double(), expected_weight, rtol=2e-5, atol=1e-6)
        assert pe.weight(3, 5).shape == (H, 3, 5)


def test_kerple_init_follows_the_paper():
    torch.manual_seed(0)
    log = build_positional_embedding("kerple_log", num_heads=20000, head_dim=D).kernel_parameters()
    power = build_positional_embedding("kerple_power", num_heads=20000, head_dim=D).kernel_parameters()
    for value, upper in [(log["r1"], 2), (log["r2"], 1), (power["r1"], 1), (power["r2"], 2)]:  # U(0, upper)
        assert value.min() >= 0.01 and value.max() <= upper
        assert abs(value.mean().item() - upper / 2) < 0.02 * upper
        assert abs(value.std().item() - upper / math.sqrt(12)) < 0.02 * upper


@pytest.mark.parametrize("name", KERPLE + ("mep_kerple",))
@pytest.mark.parametrize("raw", [-5.0, -1e4, 5.0, 1e4])
def test_kernel_constraints_hold_whatever_the_raw_parameters(name, raw):
    pe = build(name, kerple_eps=0.01)
    with torch.no_grad():
        for param_name, param in pe.named_parameters():
            if "raw_" in param_name:
                param.fill_(raw)
    values = pe.kernel_parameters()
    assert values and all(v.min() >= 0.01 for v in values.values())
    assert all(values[p].max() <= 2 for p in EXPONENTS.get(name, []))
    assert torch.isfinite(pe.distance_tables(512)[0]).all()


@pytest.mark.parametrize("name", [n for n in bias_methods() if list(build(n).parameters())])
def test_gradients_reach_every_parameter(name):
    pe = build(name)
    with torch.no_grad():  # also from below the lower bound: the constraint must not block gradients
        for param_name, param in pe.named_parameters():
            if "raw_" in param_name:
                param.fill_(-5.0)
    bias, weight = pe.pairwise(torch.arange(64), torch.arange(64))
    (bias.sum() + (0 if weight is None else weight.sum())).backward()
    for param_name, param in pe.named_parameters():
        assert param.grad is not None and torch.isfinite(param.grad).all(), param_name
        if "raw_" in param_name:
            assert (param.grad != 0).all(), param_name


def mep_float64(log_terms, weights):
    return torch.log(sum(w * torch.exp(t) for w, t in zip(weights, log_terms)))


def test_mep_matches_float64_formula():
    m = torch.tensor(SPEC_SLOPES[8]).double()[:, None]
    d = torch.arange(1000).double()
    expected = mep_float64([-m * d, -(m / 2) * d, -m * d * d], [1 / 3] * 3)
    torch.testing.assert_close(build("mep", num_heads=8).distance_tables(1000)[0].double(), expected,
                               rtol=1e-5, atol=1e-5)


def test_mep_stays_finite_where_its_exponentials_underflow():
    bias = build("mep", num_heads=8).distance_tables(5000)[0]
    assert torch.isfinite(bias).all()  # exp(-0.25 * 4999) is 0 in fp32: a log-of-sum would give -inf
    torch.testing.assert_close(bias[0, 4999], torch.tensor(-0.25 * 4999 - math.log(3)))


def test_mep_kerple_matches_float64_formula():
    pe = build("mep_kerple")
    m = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)]).double()[:, None]
    d = torch.arange(600).double()
    p = {k: v.detach().double()[:, None] for k, v in pe.kernel_parameters().items()}
    t5 = pe.learned["t5"].table.detach().double()[hf_t5_bucket(d.long())].T * math.sqrt(D)
    kerple = -p["kerple_log.r1"] * torch.log(1 + p["kerple_log.r2"] * d)
    expected = mep_float64([-m * d * d, -m * d, t5, kerple], [0.25] * 4)
    torch.testing.assert_close(pe.distance_tables(600)[0].double(), expected, rtol=1e-5, atol=1e-5)


def test_mep_kerple_mixture_is_configurable():
    pe = build("mep_kerple", mep_kernels=["exponential", "kerple_log"], mep_weights=[3, 1])
    assert list(pe.learned) == ["kerple_log"] and list(pe.kernel_parameters()) == ["kerple_log.r1", "kerple_log.r2"]
    m = torch.tensor([2.0 ** (-8 * (h + 1) / H) for h in range(H)]).double()[:, None]
    d = torch.arange(300).double()
    p = {k: v.detach().double()[:, None] for k, v in pe.kernel_parameters().items()}
    expected = mep_float64([-m * d, -p["kerple_log.r1"] * torch.log(1 + p["kerple_log.r2"] * d)], [0.75, 0.25])
    torch.testing.assert_close(pe.distance_tables(300)[0].double(), expected, rtol=1e-5, atol=1e-5)


def test_mep_kerple_rejects_bad_mixtures():
    with pytest.raises(PositionalEmbeddingError, match=r"mep-kernels=\['exponential', 'cauchy'\] must be distinct "
                       r"names from exponential, exponential_half, gaussian, t5, kerple_log"):
        build("mep_kerple", mep_kernels=["exponential", "cauchy"])
    with pytest.raises(PositionalEmbeddingError, match="mep-weights=\\[1, 2\\] must be 3 positive numbers"):
        build("mep_kerple", mep_kernels=["exponential", "gaussian", "t5"], mep_weights=[1, 2])


# ---------------------------------------------------------------- FIRE
def test_fire_matches_float64_formula():
    pe = build("fire", fire_init_L=16.0)
    q, k = torch.arange(10, 40), torch.arange(0, 40)
    i, j = q.double()[:, None], k.double()[None, :]
    c, L = 0.1, 16.0

    def psi(x):
        return torch.log(c * x + 1)

    x = (psi((i - j).clamp(min=0)) / psi(torch.maximum(i, torch.tensor(L).double())))[..., None]
    (w1, b1), (w2, b2) = [(layer.weight.detach().double(), layer.bias.detach().double())
                          for layer in (pe.mlp[0], pe.mlp[2])]
    expected = (torch.relu(x @ w1.T + b1) @ w2.T + b2).permute(2, 0, 1)
    bias, weight = pe.pairwise(q, k)
    assert "query_terms" in pe.channels and pe.distance_tables(40) == (None, None) and weight is None
    torch.testing.assert_close(bias.double(), expected, rtol=1e-4, atol=1e-5)


def test_fire_gradients_match_float64_autograd_with_queries_on_both_sides_of_the_threshold():
    """Rows below L read a per-distance table, rows past it run the MLP per pair: the same function,
    so every parameter's gradient (c and L included) must equal float64 autograd of the formula, also
    for queries in no particular order (a KV cache's)."""
    pe = build("fire", fire_init_L=16.0)
    with torch.no_grad():
        pe.c.fill_(0.3)
        pe.L_multiplier.fill_(1.2)  # L = 19.2: between positions
    q, k = torch.tensor([30, 3, 19, 25, 10, 20, 0]), torch.arange(0, 31)
    weights = torch.randn(H, len(q), len(k), dtype=torch.float64)
    (pe.pairwise(q, k)[0].double() * weights).sum().backward()
    got = {name: p.grad.clone() for name, p in pe.named_parameters()}
    params = {name: p.detach().double().requires_grad_() for name, p in pe.named_parameters()}
    i, j = q.double()[:, None], k.double()[None, :]

    def psi(x):
        return torch.log((params["c"] * x).abs() + 1)

    L = (params["L_multiplier"] * 16.0).abs()
    x = (psi((i - j).clamp(min=0)) / (psi(torch.maximum(i, L)) + 1e-6))[..., None]
    hidden = torch.relu(x @ params["mlp.0.weight"].T + params["mlp.0.bias"])
    expected = (hidden @ params["mlp.2.weight"].T + params["mlp.2.bias"]).permute(2, 0, 1)
    torch.testing.assert_close(pe.pairwise(q, k)[0].double(), expected.detach(), rtol=1e-4, atol=1e-5)
    (expected * weights).sum().backward()
    for name, p in params.items():
        torch.testing.assert_close(got[name].double(), p.grad, rtol=1e-4, atol=1e-4, msg=name)


def test_fire_is_a_distance_table_where_every_query_is_below_its_threshold():
    """Below L every row's normaliser is psi(L): distance_tables_at gives the table pairwise reads (the
    formula's own test is above), and attention takes the table strategies: in training, the table
    gradient. From the first position at L on, no table: pairwise, and attention's pairwise strategies."""
    from megatron.model.attention import AttentionRun, plan_attention
    pe = build("fire", fire_init_L=16.0)
    below = torch.arange(16)
    bias, weight = pe.distance_tables_at(below, 16)
    assert weight is None and bias.shape == (H, 16) and bias.requires_grad
    d = (below[:, None] - below[None, :]).clamp(min=0)
    torch.testing.assert_close(bias[:, d], pe.pairwise(below, below)[0])
    assert pe.distance_tables_at(torch.arange(17), 17) is None  # position 16 = L reads i
    plan = plan_attention(pe, below, AttentionRun(impl="auto", window=None, block_size=8, needs_grad=True,
                                                  dropout_p=0.0))
    assert plan.table_grad and plan.distance_only, plan.name
    plan = plan_attention(pe, torch.arange(17), AttentionRun(impl="auto", window=None, block_size=8, needs_grad=True,
                                                             dropout_p=0.0))
    assert not plan.table_grad and not plan.distance_only, plan.name


# ---------------------------------------------------------------- protocol properties, every method
def own_pairwise():
    """Distance-only modules whose `pairwise` is their own code, not base.py's gather of their tables: the
    registered ones that override it, and the temperature wrapper (its bias times s_h two ways)."""
    modules = {n: (lambda n=n: build(n)) for n in available()
               if ("query_terms" not in build(n).channels) and type(build(n)).pairwise is not PositionalEmbedding.pairwise}
    modules["kerple_log+head_scale"] = lambda: Tempered(build("kerple_log"), {"type": "head_scale", "init": 0.7})
    modules["rotary+ssmax"] = lambda: Tempered(build("rotary", max_position_embeddings=64), {"type": "ssmax"})
    return modules


@pytest.mark.parametrize("name", own_pairwise())
def test_tables_agree_with_pairwise(name):
    pe = own_pairwise()[name]()
    assert ("query_terms" not in pe.channels)
    q, k = torch.arange(90, 100), torch.arange(30, 100)  # offset positions, as in a sliding window
    d = (q[:, None] - k[None, :]).clamp(min=0)
    for table, pairwise in zip(pe.distance_tables(100), pe.pairwise(q, k)):
        if table is None:
            assert pairwise is None
        else:
            assert table.dtype == torch.float32 and table.shape == (H, 100)
            torch.testing.assert_close(pairwise, table[:, d])


@pytest.mark.parametrize("name", bias_methods())
def test_tables_stay_float32_in_a_half_precision_model(name):
    pe = build(name).to(torch.bfloat16)
    bias, weight = pe.pairwise(torch.arange(300), torch.arange(300))
    assert bias.dtype == torch.float32 and (weight is None or weight.dtype == torch.float32)
    assert torch.isfinite(bias).all()


@pytest.mark.parametrize("name", [n for n in available() if n != "learned"])
def test_every_relative_method_reaches_16x_its_training_length(name):
    pe = build(name)
    length = 16 * 64
    with torch.no_grad():
        bias = pe.bias(length, length)
        weight = pe.weight(1, length)
        positions = torch.arange(length)
        q, k = pe.rotate_qk(torch.randn(1, H, length, D), torch.randn(1, H, length, D), positions, positions)
        x = pe.add_to_embeddings(torch.zeros(1, length, HIDDEN), positions)
    for t in (bias, weight, q, k, x):
        assert t is None or torch.isfinite(t).all()
    assert bias is None or bias.shape == (H, length, length)


def test_kerple_init_bounds_come_from_the_config():
    torch.manual_seed(0)
    pe = build_positional_embedding("kerple_log", num_heads=512, head_dim=8, kerple_init={"r1": 0.1})
    values = pe.kernel_parameters()
    assert values["r1"].max() <= 0.1 + 1e-6 and values["r1"].mean() < 0.1
    assert values["r2"].max() > 0.5  # r2 keeps the paper's U(0, 1)
    with pytest.raises(PositionalEmbeddingError, match=r"kerple-init names \['r3'\], which KerpleLog does not have"):
        build_positional_embedding("kerple_log", num_heads=4, head_dim=8, kerple_init={"r3": 1.0})
