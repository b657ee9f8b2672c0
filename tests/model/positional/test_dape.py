"""`dape` (positional_embeddings/dape.py), DAPE V1 and V2 over a bias method: a float64 formula written here
from the papers with explicit loops over (i, j), on every attention path that can run it (with a window
too); the KV cache against the full forward; the Hugging Face export's logits; gradients of the blocked
path; the config's refusals; and training and evaluating at 4x through the entry points."""
import math

import pytest
import torch
from tests.support.hf_export import tiny_config
from tests.support.generation import PROMPTS, assert_cache_matches_full_forward, tiny_model

from megatron.errors import NeoXArgsError
from megatron.neox_arguments.to_model import model_config
from megatron.model.attention import AttentionRun, attend, plan_attention
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.model.positional_embeddings.dape import Dape
from megatron.neox_arguments import NeoXArgs

H, D, HIDDEN = 3, 8, 5


def dape(version, kernel=3, base="kerple_log", seed=0, form="project"):
    torch.manual_seed(seed)
    pe = Dape(build_positional_embedding(base, num_heads=H, head_dim=D, hidden_size=H * D),
              {"version": version, "hidden": HIDDEN, **({"kernel": kernel, "form": form} if version == 2 else {})})
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.rand_like(p))
    return pe


def leaky(x):
    return x if x >= 0 else 0.01 * x


def formula_logits(q, k, pe, window=None):
    """float64 logits [b, H, L, L] (visible entries) from the definitions, one (i, j) and channel at a time:
    A = q.k / sqrt(D), B = -r1 log(1 + r2 (i - j)) (kerple_log), logits = A + B + f([A; B]). Version 2 in the
    authors' form (their Kerple_DAPEV2: x + bias + mlp2(tril([x; bias])) over the whole L x L matrix): the
    hidden map is not zeroed past row i's keys, only outside the matrix (the convolution's zero padding) and,
    with a window (which they had not), before the row's first visible key."""
    q, k = q.double(), k.double()
    b, heads, length, d = q.shape
    r = {name: value.detach().double() for name, value in pe.base.kernel_parameters().items()}
    w1, b1, w2, b2 = (p.detach().double() for p in (pe.dape_in.weight, pe.dape_in.bias, pe.dape_out.weight,
                                                      pe.dape_out.bias))
    hidden = w1.shape[0]

    def visible(i, j):
        return 0 <= j <= i and (window is None or i - j < window)

    def feature(n, c, i, j):  # channel c of [A; B] at (i, j); 0 where j is not visible to i (version 2)
        if not visible(i, j):
            return 0.0
        if c < heads:
            return float(q[n, c, i] @ k[n, c, j]) / math.sqrt(d)
        return float(-r["r1"][c - heads] * math.log1p(r["r2"][c - heads] * (i - j)))

    out = torch.zeros(b, heads, length, length, dtype=torch.float64)
    for n in range(b):
        for i in range(length):
            for j in range(i + 1):
                if not visible(i, j):
                    continue
                if pe.version == 1:
                    x = [feature(n, c, i, j) for c in range(2 * heads)]
                    h = [leaky(float(b1[u]) + sum(float(w1[u, c]) * x[c] for c in range(2 * heads)))
                         for u in range(hidden)]
                    f = [float(b2[o]) + sum(float(w2[o, u]) * h[u] for u in range(hidden)) for o in range(heads)]
                else:
                    half = pe.kernel // 2

                    def h(u, jj):  # the hidden map at key jj: 0 past the visible keys (and padding)
                        first = 0 if window is None else max(0, i - window + 1)  # row i's first visible key
                        if not visible(i, jj) if pe.form == "project" else not first <= jj < length:
                            return 0.0
                        return leaky(float(b1[u]) + sum(float(w1[u, c, 0, t]) * feature(n, c, i, jj + t - half)
                                                        for c in range(2 * heads) for t in range(pe.kernel)))
                    f = [float(b2[o]) + sum(float(w2[o, u, 0, t]) * h(u, j + t - half)
                                            for u in range(hidden) for t in range(pe.kernel)) for o in range(heads)]
                for o in range(heads):
                    out[n, o, i, j] = feature(n, o, i, j) + feature(n, heads + o, i, j) + f[o]
    return out


def formula_attention(q, k, v, pe, window=None):
    length = q.shape[2]
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    seen = (j <= i) & ((i - j < window) if window is not None else True)
    logits = formula_logits(q, k, pe, window).masked_fill(~seen, float("-inf"))
    return logits.softmax(-1) @ v.double()


@pytest.mark.parametrize("version, kernel", [(1, None), (2, 3), (2, 5)])
def test_the_score_edit_equals_the_float64_formula(version, kernel):
    pe, length = dape(version, kernel or 3), 9
    torch.manual_seed(1)
    q, k = torch.randn(2, H, length, D), torch.randn(2, H, length, D)
    positions = torch.arange(length)
    visible = torch.ones(length, length, dtype=torch.bool).tril()
    bias, _ = pe.pairwise(positions, positions)
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(D)
    with torch.no_grad():
        ours = pe.modify_scores(scores, bias.double(), q.double(), k.double(), positions, positions, visible)
    # The kernel's bias table is float32 (kerple.py), the formula's float64: agreement to its rounding.
    torch.testing.assert_close(ours.masked_fill(~visible, 0), formula_logits(q, k, pe), atol=1e-6, rtol=0)


@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("version", [1, 2])
def test_every_path_that_runs_it_equals_the_float64_formula(version, window):
    pe, length = dape(version), 13
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, H, length, D) for _ in range(3))
    expected = formula_attention(q, k, v, pe, window)
    for impl, block in (("sdpa", 4), ("blocked", 4), ("blocked", 1), ("blocked", 64), ("auto", 5)):
        plan = plan_attention(pe, torch.arange(length), AttentionRun(impl=impl, window=window, block_size=block,
                                                                     needs_grad=False, dropout_p=0.0))
        with torch.no_grad():
            out = attend(q, k, v, plan)
        torch.testing.assert_close(out.double(), expected, atol=1e-5, rtol=0, msg=lambda m: f"{impl}/{block}: {m}")
    with pytest.raises(NeoXArgsError, match=r"attention-impl is 'flex', but this positional method rewrites"):
        plan_attention(pe, torch.arange(length), AttentionRun(impl="flex", window=window, block_size=4,
                                                              needs_grad=False, dropout_p=0.0))


@pytest.mark.parametrize("version", [1, 2])
def test_blocked_gradients_equal_the_written_out_matrix(version):
    pe, length = dape(version), 20
    torch.manual_seed(3)
    inputs = [torch.randn(2, H, length, D, requires_grad=True) for _ in range(3)]
    grads = {}
    for impl in ("sdpa", "blocked"):
        plan = plan_attention(pe, torch.arange(length), AttentionRun(impl=impl, window=None, block_size=6,
                                                                     needs_grad=True, dropout_p=0.0))
        grads[impl] = torch.autograd.grad(attend(*inputs, plan).square().sum(), [*inputs, *pe.parameters()])
    assert any(g.abs().sum() > 0 for g in grads["blocked"][3:])  # the MLP / convolution and kernel learn
    for a, b in zip(grads["sdpa"], grads["blocked"]):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("setting", [{"version": 1, "hidden": 8}, {"version": 2, "hidden": 8, "kernel": 3},
                                     {"version": 2, "hidden": 8, "kernel": 3, "attention_window": 5}],
                         ids=["v1", "v2", "v2-window"])
def test_cached_generation_equals_a_full_forward(setting):
    setting = dict(setting)
    window = setting.pop("attention_window", None)
    model = tiny_model("kerple_log", dape=setting, attention_window=window)
    assert_cache_matches_full_forward(model, PROMPTS, 20)


# ----------------------------------------------------------- version 2 in the authors' exact form (issue 38)
@pytest.mark.parametrize("window", [None, 4])
@pytest.mark.parametrize("kernel", [3, 5])
def test_the_authors_form_equals_their_float64_formula_where_the_whole_matrix_is_written_out(kernel, window):
    pe, length = dape(2, kernel, form="authors"), 13
    torch.manual_seed(2)
    q, k, v = (torch.randn(1, H, length, D) for _ in range(3))
    expected = formula_attention(q, k, v, pe, window)
    for impl in ("sdpa", "auto"):
        plan = plan_attention(pe, torch.arange(length), AttentionRun(impl=impl, window=window, block_size=4,
                                                                     needs_grad=False, dropout_p=0.0))
        assert plan.name == "sdpa_written_out"
        with torch.no_grad():
            torch.testing.assert_close(attend(q, k, v, plan).double(), expected, atol=1e-5, rtol=0)
    # a block of rows cannot give it (its last row would read the padding, not the next key's hidden map)
    with pytest.raises(NeoXArgsError, match=r"attention-impl is 'blocked', but .*it does not handle a score rewrite "
                                            r"whose rows read past their own keys"):
        plan_attention(pe, torch.arange(length), AttentionRun(impl="blocked", window=window, block_size=4,
                                                              needs_grad=False, dropout_p=0.0))


def test_in_the_authors_form_a_rows_logits_depend_on_the_forwards_length_and_by_how_much():
    """Row i of a forward over L tokens against row i as the last of a forward over i + 1: equal in the
    project's form, not in the authors' (but the last row always equal); and the two forms' outputs with
    identical weights, the size docs/positional-methods.md states."""
    torch.manual_seed(4)
    length = 24
    q, k, v = (torch.randn(1, H, length, D) for _ in range(3))
    outputs = {}
    for form in ("project", "authors"):
        pe = dape(2, form=form)
        with torch.no_grad():
            whole = attend(q, k, v, plan_attention(pe, torch.arange(length),
                                                   AttentionRun(impl="sdpa", window=None, block_size=8,
                                                                needs_grad=False, dropout_p=0.0)))
            prefix = attend(q[:, :, :10], k[:, :, :10], v[:, :, :10],
                            plan_attention(pe, torch.arange(10), AttentionRun(impl="sdpa", window=None, block_size=8,
                                                                              needs_grad=False, dropout_p=0.0)))
        row_9_moves = (whole[:, :, 9] - prefix[:, :, 9]).abs().max()
        assert (row_9_moves > 1e-3) if form == "authors" else (row_9_moves < 1e-6)
        torch.testing.assert_close(whole[:, :, :9], prefix[:, :, :9], atol=1e-6, rtol=0) if form == "project" else None
        outputs[form] = whole
    difference = (outputs["authors"] - outputs["project"]).abs().amax(dim=(0, 1, 3))  # per row
    # row 0 sees one key (its output is v_0 whatever its logit); the last row reads the padding in both forms
    assert difference[0] < 1e-6 and difference[-1] < 1e-6 and bool((difference[1:-1] > 1e-3).all())


def test_the_authors_form_generates_with_the_cache_as_a_full_forward():
    """A cached step's queries are the forward's last rows: with one layer cached generation (left-padded
    rows of different lengths) equals a full forward of each row at every step; with more layers a row
    cached as the last is not the last later, so the method says its cache is inexact. (Its export:
    tests/checkpoint/test_hf_export.py, case dape2-authors.)"""
    model = tiny_model("kerple_log", num_layers=1, dape={"version": 2, "hidden": 8, "form": "authors"})
    assert_cache_matches_full_forward(model, PROMPTS, 20)
    assert not any(pe.cache_exact for pe in model.positional_embeddings())
    assert all(pe.cache_exact for pe in tiny_model("kerple_log", dape={"version": 2}).positional_embeddings())


@pytest.mark.parametrize("value, message", [
    ({"version": 3}, r"dape: version is 3; choose 1"),
    ({"version": 2, "kernel": 4}, r"dape: kernel must be odd"),
    ({"version": 1, "kernel": 3}, r"dape: kernel is version 2's"),
    ({"version": 1, "width": 3}, r"dape: unknown key\(s\) \['width'\]"),
    ("yes", r"dape must be a mapping"),
    ({"version": 2, "form": "paper"}, r"dape: form is 'paper'; choose project .* or authors"),
    ({"version": 1, "form": "authors"}, r"dape: form authors is version 2's"),
])
def test_a_bad_dape_is_one_paragraph(value, message):
    with pytest.raises(NeoXArgsError, match=message):
        NeoXArgs.from_dict(tiny_config("alibi") | {"dape": value})


def test_wrappers_cannot_wrap_a_method_that_rewrites_the_scores_itself():
    with pytest.raises(NeoXArgsError, match=r"dape: cannot wrap pos-emb 'cope', which rewrites the score matrix"):
        NeoXArgs.from_dict(tiny_config("cope") | {"dape": {"version": 1}})
    with pytest.raises(NeoXArgsError, match=r"attention-temperature: cannot wrap pos-emb 'cope'"):
        NeoXArgs.from_dict(tiny_config("cope") | {"attention_temperature": {"type": "ssmax"}})
    with pytest.raises(NeoXArgsError, match=r"entry 2 of 2: pos-emb 'cope' rewrites the score matrix itself; dape "
                                            r"cannot wrap it"):
        NeoXArgs.from_dict(tiny_config("alibi") | {"layer_pattern": [{}, {"pos-emb": "cope", "dape": {"version": 1}}]})


def test_the_checkpoint_and_the_results_carry_it():
    from megatron.evaluation.identity import evaluation_variant
    from megatron.model.model_config import ModelConfig, differences
    with_dape = NeoXArgs.from_dict(tiny_config("kerple_log") | {"dape": {"version": 2}})
    plain = NeoXArgs.from_dict(tiny_config("kerple_log"))
    assert differences(model_config(with_dape, 256), model_config(plain, 256)) == [
        "dape: checkpoint {'version': 2}, this run None"]
    assert evaluation_variant(with_dape).startswith("dape2-") and evaluation_variant(plain) is None
