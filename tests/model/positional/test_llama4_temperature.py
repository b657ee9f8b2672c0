"""`attention-temperature: {type: llama4}` (positional_embeddings/temperature.py) against the pinned transformers'
own Llama 4 attention on a layer without positions (`Llama4TextAttention` with attention temperature tuning), in
float64, forward and backward, on every attention path that takes it; then through the model: a `layer-pattern`
of rotary and tempered NoPE layers (Llama 4's iRoPE) decodes with the KV cache as the full forward does, and the
Hugging Face export gives the same logits."""
import pytest
import torch
from tests.support.hf_export import TRAIN_LENGTH, tiny_config
from transformers.models.llama4.configuration_llama4 import Llama4TextConfig
from transformers.models.llama4.modeling_llama4 import Llama4TextAttention

from megatron.errors import NeoXArgsError
from megatron.model import GPTModel
from megatron.model.attention import AttentionRun, attend, plan_attention
from megatron.model.positional_embeddings import build_positional_embedding
from megatron.model.positional_embeddings.temperature import Tempered
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.to_model import model_config
from megatron.tokenizer import build_tokenizer

H, D, L = 4, 8, 70
SCALE, FLOOR = 0.7, 8  # a floor far under L, so most queries are scaled, and by different factors


def llama4_nope_attention():
    config = Llama4TextConfig(hidden_size=H * D, num_attention_heads=H, num_key_value_heads=H, head_dim=D,
                              num_hidden_layers=1, no_rope_layers=[0], attn_temperature_tuning=True,
                              attn_scale=SCALE, floor_scale=FLOOR, attention_bias=False, use_qk_norm=False)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    return Llama4TextAttention(config, layer_idx=0).double()


@pytest.mark.parametrize("impl", ["sdpa", "blocked"])  # flex: no backward on CPU
def test_a_nope_layer_equals_llama4s_attention_forward_and_backward(impl):
    theirs = llama4_nope_attention()
    assert not theirs.use_rope and theirs.attn_temperature_tuning
    x = torch.randn(1, L, H * D, dtype=torch.float64, generator=torch.Generator().manual_seed(1), requires_grad=True)
    causal = torch.full((L, L), float("-inf"), dtype=torch.float64).triu(1)[None, None]
    expected, _ = theirs(x, position_embeddings=None, attention_mask=causal)
    expected_grads = torch.autograd.grad(expected.square().sum(), [x, *theirs.parameters()])

    pe = Tempered(build_positional_embedding("none", num_heads=H, head_dim=D, hidden_size=H * D,
                                             max_position_embeddings=32),
                  {"type": "llama4", "scale": SCALE, "floor": FLOOR})
    assert list(pe.parameters()) == []  # a fixed temperature: nothing learned
    q, k, v = (proj(x).view(1, L, H, D).transpose(1, 2) for proj in (theirs.q_proj, theirs.k_proj, theirs.v_proj))
    plan = plan_attention(pe, torch.arange(L), AttentionRun(impl=impl, window=None, block_size=16, needs_grad=True,
                                                            dropout_p=0.0, dtype=torch.float64))
    ours = theirs.o_proj(attend(*plan.rotate(q, k), v, plan).transpose(1, 2).reshape(1, L, H * D))
    grads = torch.autograd.grad(ours.square().sum(), [x, *theirs.parameters()])
    # transformers computes the scale from float32 positions (then multiplies float64 q): 1e-7, not 1e-10
    torch.testing.assert_close(ours, expected, atol=1e-7, rtol=0)
    for mine, reference in zip(grads, expected_grads):
        torch.testing.assert_close(mine, reference, atol=1e-6, rtol=0)


def test_the_scale_is_one_up_to_the_floor_then_grows_with_the_log():
    pe = Tempered(build_positional_embedding("none", num_heads=H, head_dim=D, hidden_size=H * D,
                                             max_position_embeddings=32), {"type": "llama4", "floor": 4, "scale": 0.5})
    t = pe.query_scale(torch.tensor([[1, 3, 4, 7, 8, 100]]))
    n = torch.tensor([1, 3, 4, 7, 8, 100], dtype=torch.float64)
    expected = 1 + 0.5 * torch.log1p(torch.floor(n / 4))  # 1, 1, 1 + 0.5 ln 2, ..., 1 + 0.5 ln 26
    torch.testing.assert_close(t.double(), expected.expand(1, H, 6), atol=1e-6, rtol=0)


@pytest.mark.parametrize("value, message", [
    ({"type": "llama4", "init": 1.0}, r"unknown key\(s\) \['init'\]; type llama4 takes floor and scale and type"),
    ({"type": "llama4", "floor": 0}, r"floor must be a positive number, got 0"),
])
def test_a_wrong_llama4_temperature_is_refused_with_the_key(value, message):
    with pytest.raises(NeoXArgsError, match=message):
        NeoXArgs.from_dict(tiny_config("none") | {"attention_temperature": value})


def test_irope_the_temperature_changes_the_nope_layers_logits():
    """The temperature is in the model (its cached decoding and export: tests/checkpoint/test_hf_export.py,
    case irope)."""
    nope = {"pos-emb": "none", "attention-temperature": {"type": "llama4", "scale": SCALE, "floor": 16}}
    args = NeoXArgs.from_dict(tiny_config("rotary") | {"layer_pattern": [{"pos-emb": "rotary"}, nope]})
    torch.manual_seed(0)
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size)).eval()
    tokens = torch.randint(0, 256, (2, 4 * TRAIN_LENGTH), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        untempered = NeoXArgs.from_dict(tiny_config("rotary") | {"layer_pattern": [{"pos-emb": "rotary"},
                                                                                     {"pos-emb": "none"}]})
        torch.manual_seed(0)
        plain = GPTModel(model_config(untempered, build_tokenizer(untempered.tokenizer_run()).padded_vocab_size)).eval()
        plain.load_state_dict(model.state_dict())  # the same weights: the temperature alone differs
        assert (plain(tokens) - model(tokens)).abs().max() > 1e-4
