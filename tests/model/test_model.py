"""GPTModel: architecture against transformers' GPT-NeoX, paths, causality, extrapolation, init, groups.

Parametrised over the positional registry, so a new method gets every model-level check."""
import math

import pytest
import torch
import transformers

from megatron.model import GPTModel, get_params_for_weight_decay_optimization
from megatron.neox_arguments.to_model import model_config
from megatron.model.attention import Flex, flex_kernel
from megatron.model.positional_embeddings import PositionalEmbeddingError, available, lookup
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.tokenizer import build_tokenizer
from tools.ckpts.hf_export.native import to_gpt_neox_state

METHODS = available()
VOCAB = 96


def make_args(**overrides):
    # Shapes match tests/model/attention/test_attention.py (4 heads of 8 dims, 40 tokens, batch 2).
    config = {"num_layers": 2, "hidden_size": 32, "num_attention_heads": 4, "seq_length": 40,
              "attention_block_size": 16, "train_micro_batch_size_per_gpu": 2, "pos_emb": "kerple_log"}
    return NeoXArgs.from_dict(config | overrides)


def make_model(seed=0, **overrides):
    torch.manual_seed(seed)
    model = GPTModel(model_config(make_args(**overrides), VOCAB))
    with torch.no_grad():  # move kernel parameters off their initial values
        for pe in model.positional_embeddings():
            for p in pe.parameters():
                p.add_(0.3 * torch.rand_like(p))
    return model


def tokens(length=40, batch=2, seed=1):
    return torch.randint(0, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("parallel_residual", [False, True])
def test_matches_transformers_gpt_neox(parallel_residual):
    """Embedding, pre-norm layers (both residual forms), exact GELU, partial rotary, untied head."""
    model = make_model(pos_emb="rotary", rotary_pct=0.25, no_weight_tying=True, gpt_j_residual=parallel_residual,
                       intermediate_size=80).eval()
    config = transformers.GPTNeoXConfig(
        vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=80,
        hidden_act="gelu", rotary_pct=0.25, rotary_emb_base=10000, max_position_embeddings=64,
        layer_norm_eps=1e-5, use_parallel_residual=parallel_residual, tie_word_embeddings=False,
        attention_dropout=0.0, hidden_dropout=0.0)
    reference = transformers.GPTNeoXForCausalLM(config).eval()
    state = to_gpt_neox_state(model.state_dict(), num_layers=2, heads=4)  # the export tool's mapping
    missing, unexpected = reference.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k or "inv_freq" in k for k in missing), missing
    ids = tokens()
    with torch.no_grad():
        torch.testing.assert_close(model(ids), reference(ids).logits, atol=2e-5, rtol=1e-4)


@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
@pytest.mark.parametrize("name", METHODS)
def test_changing_a_future_token_changes_no_earlier_output(name, impl):
    model = make_model(pos_emb=name, attention_impl=impl).eval()
    ids = tokens()
    changed = ids.clone()
    changed[:, 23] = (changed[:, 23] + 1) % VOCAB
    with torch.no_grad():
        before, after = model(ids), model(changed)
    torch.testing.assert_close(after[:, :23], before[:, :23], atol=0, rtol=0)
    assert (after[:, 23:] - before[:, 23:]).abs().amax(dim=-1).min() > 0, "later outputs must see the change"


@pytest.mark.parametrize("name", METHODS)
def test_sdpa_and_blocked_models_agree_with_gradients(name):
    results = {}
    for impl in ("sdpa", "blocked"):
        model = make_model(pos_emb=name, attention_impl=impl, attention_window=13, num_layers=3)
        logits = model(tokens())
        torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens(seed=2).flatten()).backward()
        results[impl] = logits.detach(), {n: p.grad for n, p in model.named_parameters()}
    torch.testing.assert_close(results["blocked"][0], results["sdpa"][0], atol=1e-5, rtol=1e-5)
    for param, expected in results["sdpa"][1].items():
        assert (expected is None) == (results["blocked"][1][param] is None), param
        if expected is not None:
            torch.testing.assert_close(results["blocked"][1][param], expected, atol=1e-6, rtol=1e-4, msg=param)


def not_on_flex(method) -> bool:
    """flex computes a softmax of q.k plus terms: a method with a channel it does not handle (a score rewrite,
    another normaliser, key transforms, channel decays) runs on the written-out strategies only."""
    return bool(set(method.channels) - Flex.handles)


def test_flex_model_forward_agrees_with_sdpa():
    # The flex path's logic in the model, on torch's eager FlexAttention (flex_kernel.py); the compiled
    # CPU kernel is tests/e2e/model/attention/test_attention.py's and the evaluation end-to-end test's.
    for name in METHODS:
        sdpa, flex = (make_model(pos_emb=name, attention_impl=impl, attention_window=13).eval()
                      for impl in ("sdpa", "blocked" if name == "fire" or not_on_flex(lookup(name)) else "flex"))
        with torch.no_grad(), flex_kernel.reference_math():
            torch.testing.assert_close(flex(tokens()), sdpa(tokens()), atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("name", METHODS)
def test_relative_methods_run_at_16x_the_training_length(name):
    # Trained at 16 tokens, evaluated at 256 with the path `auto` picks for CPU inference.
    model = make_model(pos_emb=name, seq_length=16, attention_block_size=64, train_micro_batch_size_per_gpu=1).eval()
    long_ids = tokens(length=256, batch=1)
    with torch.no_grad():
        if model.positional_embeddings()[0].max_length is not None:
            with pytest.raises(PositionalEmbeddingError, match="only embed positions < max-position-embeddings=16"):
                model(long_ids)
        else:
            logits = model(long_ids)
            assert logits.shape == (1, 256, VOCAB) and torch.isfinite(logits).all()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("impl", ["sdpa", "blocked"])
def test_low_precision_training_step(dtype, impl):
    reference = make_model(pos_emb="kerple_bias_weight", attention_impl=impl)
    model = make_model(pos_emb="kerple_bias_weight", attention_impl=impl).to(dtype)
    logits = model(tokens())
    assert logits.dtype == dtype
    logits.float().sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())
    with torch.no_grad():
        torch.testing.assert_close(logits.float(), reference(tokens()), atol=5e-2, rtol=5e-2)


def test_checkpoint_activations_gives_the_same_gradients():
    grads = []
    for checkpointing in (False, True):
        model = make_model(attention_impl="blocked", checkpoint_activations=checkpointing, hidden_dropout=0.1,
                           attention_dropout=0.1)
        torch.manual_seed(5)  # same dropout masks; the recomputation must replay them
        model(tokens()).square().mean().backward()
        grads.append([p.grad for p in model.parameters()])
    for with_checkpointing, without in zip(grads[1], grads[0]):
        torch.testing.assert_close(with_checkpointing, without, atol=1e-6, rtol=1e-5)


def test_kernels_are_shared_unless_per_layer():
    shared = make_model(num_layers=3)
    assert len(shared.positional_embeddings()) == 1
    per_layer = make_model(num_layers=3, pos_emb_per_layer=True)
    modules = per_layer.positional_embeddings()
    assert len(modules) == 3 and len({id(m) for m in modules}) == 3
    per_layer(tokens()).sum().backward()
    r1 = [m.kernel_parameters()["r1"] for m in modules]
    assert not torch.equal(r1[0], r1[1]), "each layer has its own kernel"
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for m in modules for p in m.parameters())
    with pytest.raises(NeoXArgsError, match="pos-emb-per-layer is set, but pos-emb 'learned' adds positions"):
        make_model(pos_emb="learned", pos_emb_per_layer=True)


def test_distance_tables_are_computed_once_per_forward():
    model = make_model(num_layers=4, attention_impl="blocked")
    pe = model.positional_embeddings()[0]
    calls = []
    compute = pe.distance_tables
    pe.distance_tables = lambda length: calls.append(length) or compute(length)
    model(tokens())
    assert calls == [40]


@pytest.mark.parametrize("method", ["normal", "scaled_normal", "small_init", "wang_init"])
def test_init_methods_have_the_neox_standard_deviations(method):
    layers, hidden = 4, 256
    model = make_model(num_layers=layers, hidden_size=hidden, init_method=method, output_layer_init_method=method,
                       init_method_std=0.02, no_weight_tying=True)
    expected = {"normal": 0.02, "scaled_normal": 0.02 / math.sqrt(2 * layers),
                "small_init": math.sqrt(2 / (5 * hidden)), "wang_init": 2 / (layers * math.sqrt(hidden))}[method]
    params = dict(model.named_parameters())
    for name in ("word_embeddings.weight", "output_head.weight", "layers.1.attention.query_key_value.weight",
                 "layers.1.attention.dense.weight", "layers.1.mlp.dense_h_to_4h.weight", "layers.1.mlp.dense_4h_to_h.weight"):
        assert params[name].mean().abs() < 0.1 * expected, name
        assert params[name].std().item() == pytest.approx(expected, rel=0.03), name
    assert torch.all(params["layers.1.attention.dense.bias"] == 0)
    assert torch.all(params["layers.1.input_layernorm.weight"] == 1)


def test_input_and_output_side_weights_use_their_own_init():
    model = make_model(num_layers=4, hidden_size=256, init_method="normal", output_layer_init_method="scaled_normal")
    params = dict(model.named_parameters())
    assert params["layers.0.mlp.dense_h_to_4h.weight"].std().item() == pytest.approx(0.02, rel=0.03)
    assert params["layers.0.mlp.dense_4h_to_h.weight"].std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.03)


@pytest.mark.parametrize("name", ["t5", "kerple_log3"])
def test_weight_decay_skips_norms_biases_and_positional_parameters(name):
    model = make_model(pos_emb=name, pos_emb_per_layer=True, norm="rmsnorm", activation="swiglu", no_weight_tying=True)
    groups = get_params_for_weight_decay_optimization(model, weight_decay=0.1)
    assert [g["weight_decay"] for g in groups] == [0.1, 0.0]
    decayed, undecayed = ({id(p) for p in g["params"]} for g in groups)
    expected_decayed = {id(m.weight) for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))
                        and not any(m is x for pe in model.positional_embeddings() for x in pe.modules())}
    assert decayed == expected_decayed
    positional = {id(p) for pe in model.positional_embeddings() for p in pe.parameters()}
    assert positional and positional <= undecayed
    norms = {id(p) for m in model.modules() if isinstance(m, torch.nn.RMSNorm) for p in m.parameters()}
    assert norms and norms <= undecayed
    assert decayed | undecayed == {id(p) for p in model.parameters()} and not decayed & undecayed


def test_tied_head_reads_the_embedding():
    tied, untied = make_model(), make_model(no_weight_tying=True)
    extra = sum(p.numel() for p in untied.parameters()) - sum(p.numel() for p in tied.parameters())
    assert extra == VOCAB * 32
    ids = tokens() % 50  # rows 50.. are never looked up as inputs: their gradient comes through the head
    tied(ids).logsumexp(-1).sum().backward()
    assert tied.word_embeddings.weight.grad[50:].abs().sum() > 0


def test_vocabulary_is_padded_by_the_tokenizer(shared_dir):
    args = NeoXArgs.from_dict({"num_layers": 1, "hidden_size": 32, "num_attention_heads": 4, "seq_length": 16,
                               "train_micro_batch_size_per_gpu": 1, "pos_emb": "alibi",
                               "tokenizer_type": "GPT2BPETokenizer", "make_vocab_size_divisible_by": 128,
                               "vocab_file": str(shared_dir / "data/gpt2/gpt2-vocab.json"),
                               "merge_file": str(shared_dir / "data/gpt2/gpt2-merges.txt")})
    before = args.to_dict()
    tokenizer = build_tokenizer(args.tokenizer_run())
    assert tokenizer.padded_vocab_size == 50304
    model = GPTModel(model_config(args, tokenizer.padded_vocab_size))
    assert args.to_dict() == before  # neither the tokenizer nor the model writes into the config
    assert model.word_embeddings.num_embeddings == 50304  # 50257 rounded up to a multiple of 128
    logits = model(torch.tensor([tokenizer.tokenize("Hello world")]))
    assert logits.shape == (1, 2, 50304)


def test_position_ids_are_one_row_for_the_batch_or_one_per_row():
    model = make_model().eval()
    with pytest.raises(ValueError, match=r"position_ids must be \[40\] shared by the batch or \[2, 40\] per row; got "
                                         r"shape \(3, 40\)"):
        model(tokens(), position_ids=torch.arange(40).expand(3, 40))
    with torch.no_grad():  # rows that agree are the shared positions
        torch.testing.assert_close(model(tokens(), position_ids=torch.arange(40).expand(2, 40)), model(tokens()))
