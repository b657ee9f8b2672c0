"""Rotary's rotation by per-forward tables: the Triton kernel (run on CPU tensors under TRITON_INTERPRET=1,
in float32 and float64) and the eager `rotate` against a float64 rotation written here, forward and
backward, for every variant whose tables the kernel applies (rotary-pct, every rotary-scaling type,
p-RoPE, xpos; shared and per-row positions; non-contiguous q); and the model computing the tables once per
forward, not per layer and tensor."""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before Triton is imported: run its kernels on the CPU

import pytest  # noqa: E402
import torch  # noqa: E402
from tests.support.generation import TRAIN_LENGTH, tiny_model  # noqa: E402

from megatron.model.positional_embeddings import build_positional_embedding  # noqa: E402

rotary_kernel = pytest.importorskip("megatron.model.attention.rotary_kernel")  # needs triton (requirements-dev)

HEADS, HEAD_DIM, ORIGINAL = 2, 16, 32
VARIANTS = {
    "rotary": ("rotary", {}),
    "rotary-pct 0.5": ("rotary", {"rotary_pct": 0.5}),
    "rotary-pct 0.75": ("rotary", {"rotary_pct": 0.75}),  # 6 pairs: not a power of 2, a 4-dim tail
    "p-RoPE 0.3": ("rotary", {"rotary_unrotated_fraction": 0.3}),
    "linear": ("rotary", {"rotary_scaling": {"type": "linear", "factor": 4}}),
    "ntk": ("rotary", {"rotary_scaling": {"type": "ntk", "factor": 4}}),
    "dynamic_ntk": ("rotary", {"rotary_scaling": {"type": "dynamic_ntk", "factor": 4}}),
    "yarn": ("rotary", {"rotary_scaling": {"type": "yarn", "factor": 4}}),  # attention factor 1.139
    "llama3": ("rotary", {"rotary_scaling": {"type": "llama3", "factor": 8}}),
    "longrope": ("rotary", {"rotary_pct": 0.5, "rotary_scaling": {
        "type": "longrope", "factor": 8, "short-factor": [1, 1.5, 2, 3], "long-factor": [2, 3, 4, 8]}}),
    "xpos": ("xpos", {"xpos_scale_base": 64}),
}


def method(variant):
    name, options = VARIANTS[variant]
    return build_positional_embedding(name, HEADS, HEAD_DIM, HEADS * HEAD_DIM, max_position_embeddings=ORIGINAL,
                                      **options)


def rotated_by_formula(x, cos, sin):
    """float64: pair i of x (dims i and i + half) turned by the table's (cos, sin) at its position; the dims past
    2 half unchanged. x [b, H, s, D]; tables [s, half] or per row [b, s, half]."""
    x, cos, sin = x.double(), cos.double(), sin.double()
    if cos.dim() == 2:
        cos, sin = cos.expand(x.shape[0], *cos.shape), sin.expand(x.shape[0], *sin.shape)
    half = cos.shape[-1]
    out = x.clone()
    for i in range(half):
        c, s = cos[:, None, :, i], sin[:, None, :, i]  # [b, 1, s]: every head alike
        a, b = x[..., i], x[..., i + half]
        out[..., i], out[..., i + half] = a * c - b * s, b * c + a * s
    return out


def q_and_k(dtype, seq=40):
    """q, k [1, H, s, D] as the layer makes them: non-contiguous views of one qkv projection."""
    qkv = torch.randn(1, seq, 3, HEADS, HEAD_DIM, dtype=dtype)
    q, k, _ = qkv.permute(2, 0, 3, 1, 4)
    return q, k


POSITIONS = torch.cat([torch.arange(24), torch.arange(16) * 9 + 30])  # past the 32 of original-max-position


@pytest.mark.parametrize("variant", VARIANTS)
def test_the_tables_rotate_as_rotate_qk_did_and_as_the_formula(variant):
    torch.manual_seed(0)
    pe, (q, k) = method(variant), q_and_k(torch.float32)
    (q_cos, q_sin), (k_cos, k_sin) = pe.rotation_tables(POSITIONS, POSITIONS, q.dtype)
    got_q, got_k = pe.rotate_qk(q, k, POSITIONS, POSITIONS)
    torch.testing.assert_close(got_q.double(), rotated_by_formula(q, q_cos, q_sin), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_k.double(), rotated_by_formula(k, k_cos, k_sin), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.float64, 1e-5)])
@pytest.mark.parametrize("variant", VARIANTS)
def test_the_kernel_is_the_formula_forward_and_backward(variant, dtype, tolerance):
    """Under the interpreter the kernel's float32 math is checked in float32 and float64 inputs (float64 in,
    float32 registers, float64 out); bf16 in and out is checked on a GPU only (the interpreter has no bf16
    arithmetic)."""
    torch.manual_seed(0)
    pe, (q, k) = method(variant), q_and_k(dtype)
    (q_cos, q_sin), (k_cos, k_sin) = pe.rotation_tables(POSITIONS, POSITIONS, q.dtype)
    for x, cos, sin in ((q, q_cos, q_sin), (k, k_cos, k_sin)):
        x = x.detach().requires_grad_()
        got = rotary_kernel.fused_rotate(x, cos, sin)
        assert got.dtype == dtype and got.shape == x.shape
        reference_x = x.detach().double().requires_grad_()
        reference = rotated_by_formula(reference_x, cos, sin)
        torch.testing.assert_close(got.double(), reference, rtol=tolerance, atol=tolerance)
        upstream = torch.randn_like(reference)
        got.backward(upstream.to(dtype))
        reference.backward(upstream)
        torch.testing.assert_close(x.grad.double(), reference_x.grad, rtol=tolerance, atol=tolerance)


def test_the_kernel_takes_per_row_tables():
    """reset-position-ids: each row its own positions [b, s], so its own tables [b, s, half]."""
    torch.manual_seed(0)
    pe = method("rotary-pct 0.5")
    x = torch.randn(3, HEADS, 20, HEAD_DIM)
    rows = torch.stack([torch.arange(20), torch.arange(20) % 7, torch.arange(20) * 3])
    cos, sin = pe.rotation_tables(rows, rows)[0]
    assert cos.shape == (3, 20, 4)
    reference = rotated_by_formula(x, cos, sin)
    torch.testing.assert_close(rotary_kernel.fused_rotate(x, cos, sin).double(), reference, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pe.rotate(x, cos, sin).double(), reference, rtol=1e-5, atol=1e-5)
    per_row = torch.cat([pe.rotate_qk(x[r:r + 1], x[r:r + 1], p, p)[0] for r, p in enumerate(rows)])
    torch.testing.assert_close(pe.rotate(x, cos, sin), per_row)


@pytest.mark.parametrize("pos_emb", ["rotary", "xpos"])
def test_the_model_computes_the_tables_once_per_forward(pos_emb, monkeypatch):
    model = tiny_model(pos_emb, num_layers=3)
    (pe,) = set(model.positional_embeddings())
    calls = []
    original = pe.rotation_tables
    monkeypatch.setattr(pe, "rotation_tables", lambda *args: calls.append(args) or original(*args))
    with torch.no_grad():
        model(torch.randint(0, 100, (2, TRAIN_LENGTH)))
    assert len(calls) == 1  # not one per layer (3) and per tensor (2)
