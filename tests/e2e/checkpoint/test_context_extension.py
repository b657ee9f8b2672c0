"""Staged context extension (docs/length-schedules.md, "Extending a trained model"): a model trained at 64
tokens fine-tuned at 256 with a new rotary base or a RoPE scaling. The extended checkpoint records the new
settings, evaluation rebuilds exactly the extended model from it alone (rotary tables against float64
formulas and transformers' YaRN), a relaunched extension resumes itself, and a fine-tune may change only
what shapes no parameter."""
import math
import pathlib

import pytest
import torch
from transformers import LlamaConfig
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

from megatron.checkpoint.checkpointing import CheckpointError, load_weights_of, read_client_state, resolve_tag
from megatron.evaluation.identity import config_hash
from megatron.checkpoint.inference_model import load
from megatron.model import GPTModel
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.to_model import model_config
from megatron.tokenizer import build_tokenizer
from tests.support.training import pretrain, tiny_args


SHORT, LONG = 64, 256
HEADS, HEAD_DIM = 4, 16  # configs/tiny.yml: hidden 64, 4 heads
SMALL = dict(train_micro_batch_size_per_gpu=2, log_interval=1)


def trained_short(stdlib_data, folder, **model):
    """The first stage: `model` trained 2 steps at 64 tokens; its save folder."""
    pretrain(tiny_args(stdlib_data, folder, train_iters=2, **SMALL, **model))
    return str(folder / "ckpt")


def extension_args(stdlib_data, folder, short_ckpt, train_iters=1, **changes):
    """The next stage: fine-tune `short_ckpt` at 256 tokens with `changes`, saving in folder/ckpt."""
    return tiny_args(stdlib_data, folder, finetune=True, load=short_ckpt, seq_length=LONG, seq_length_val=LONG,
                     train_iters=train_iters, lr_decay_iters=4, **SMALL, **changes)


def evaluated_alone(ckpt):
    """What evaluate.py builds from `--set load=CKPT` and nothing else: its config, and the model the checkpoint
    records."""
    args = NeoXArgs.from_dict({"load": ckpt}, world_size=1)
    return args, load(args.load, args.inference_run(), device="cpu", dtype=torch.float32)


def in_memory_model(args):
    """The model the extension trained (its own config), with its saved weights."""
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size))
    where = pathlib.Path(args.save) / resolve_tag(args.save, None)
    load_weights_of(read_client_state(args.save, where.name), where, model)
    return model.eval()


def assert_same_logits(loaded, args):
    tokens = torch.randint(0, 256, (1, LONG), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(loaded.model(tokens), in_memory_model(args)(tokens))


def float64_inverse_frequencies(base, factor=1.0):
    """Plain rotary base^(-2i/d), over d = head dim, divided by PI's factor, in float64."""
    i = torch.arange(HEAD_DIM // 2, dtype=torch.float64)
    return base ** (-2 * i / HEAD_DIM) / factor


def transformers_yarn(factor):
    config = LlamaConfig(hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS, max_position_embeddings=LONG,
                         rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": factor,
                                          "original_max_position_embeddings": SHORT})
    return ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")


@pytest.fixture(scope="module")
def rotary_short(stdlib_data, tmp_path_factory):
    return trained_short(stdlib_data, tmp_path_factory.mktemp("rotary64"), pos_emb="rotary")


YARN = {"type": "yarn", "factor": 4, "original-max-position": SHORT}
EXTENSIONS = {
    "base": (dict(rotary_emb_base=500000), lambda: (float64_inverse_frequencies(500000), 1.0)),
    "pi": (dict(rotary_scaling={"type": "linear", "factor": 4}), lambda: (float64_inverse_frequencies(10000, 4), 1.0)),
    "yarn": (dict(rotary_scaling=YARN), lambda: transformers_yarn(4.0)),
}


@pytest.mark.parametrize("name", EXTENSIONS)
def test_the_extended_checkpoint_rebuilds_the_extended_model(name, rotary_short, stdlib_data, tmp_path):
    changes, reference = EXTENSIONS[name]
    args = extension_args(stdlib_data, tmp_path, rotary_short, pos_emb="rotary", **changes)
    result = pretrain(args)
    assert sorted(result.losses) == [1] and math.isfinite(result.losses[1])
    config, loaded = evaluated_alone(str(tmp_path / "ckpt"))
    assert config.seq_length == LONG
    for key, value in changes.items():  # the checkpoint gave the new settings, not the first stage's
        assert getattr(config, key) == value
    inv_freq, attention_factor = loaded.model.pos_embs[0].frequencies()
    expected, expected_factor = reference()
    torch.testing.assert_close(inv_freq.double(), expected.double(), rtol=1e-6, atol=0)
    assert attention_factor == pytest.approx(expected_factor, rel=1e-12)
    assert not torch.allclose(inv_freq.double(), float64_inverse_frequencies(10000), rtol=1e-3)  # not the 1st stage's
    assert_same_logits(loaded, args)


def test_the_recorded_model_config_alone_rebuilds_the_extended_model(rotary_short, stdlib_data, tmp_path):
    """The model_config of the checkpoint records the scaling its weights were trained with: a checkpoint
    that keeps no merged config (an older one's layout) still evaluates as the extended model."""
    args = extension_args(stdlib_data, tmp_path, rotary_short, pos_emb="rotary", rotary_emb_base=500000,
                          rotary_scaling=YARN)
    pretrain(args)
    where = tmp_path / "ckpt" / "global_step1"
    record = read_client_state(str(where.parent), where.name)["model_config"]
    assert (record["rotary_emb_base"], record["rotary_scaling"]) == (500000, YARN)
    assert "rotary_scaling" not in read_client_state(rotary_short, "global_step2")["model_config"]  # plain: none
    (where / "resolved_config.yml").unlink()
    loaded = load(str(where), device="cpu", dtype=torch.float32)
    assert loaded.run is None and loaded.model.config.run_options["rotary_scaling"] == YARN  # the record alone
    expected = ROPE_INIT_FUNCTIONS["yarn"](LlamaConfig(
        hidden_size=HEADS * HEAD_DIM, num_attention_heads=HEADS, max_position_embeddings=LONG,
        rope_parameters={"rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0,
                         "original_max_position_embeddings": SHORT}), "cpu")[0]
    torch.testing.assert_close(loaded.model.pos_embs[0].frequencies()[0].double(), expected.double(), rtol=1e-6, atol=0)
    assert_same_logits(loaded, args)


def test_a_relaunched_extension_resumes_itself_exactly(rotary_short, stdlib_data, tmp_path):
    """3 steps straight == 2 steps, stop, the same command again with train-iters 3: it resumes the extension
    from its own step 2 (not the first stage's weights at step 0), with the same losses to the last bit."""
    straight = pretrain(extension_args(stdlib_data, tmp_path / "straight", rotary_short, train_iters=3,
                                       pos_emb="rotary", rotary_scaling=YARN))
    first = pretrain(extension_args(stdlib_data, tmp_path / "split", rotary_short, train_iters=2, pos_emb="rotary",
                                    rotary_scaling=YARN))
    second = pretrain(extension_args(stdlib_data, tmp_path / "split", rotary_short, train_iters=3, pos_emb="rotary",
                                     rotary_scaling=YARN))
    assert sorted(second.losses) == [3]
    assert {**first.losses, **second.losses} == straight.losses


def test_a_layer_pattern_extends_its_global_layers_only(stdlib_data, tmp_path):
    """OLMo 3's recipe: YaRN on the full-attention layers, the windowed ones unchanged."""
    pattern = [{"attention-window": 16}, {}]
    short = trained_short(stdlib_data, tmp_path / "short", pos_emb="rotary", layer_pattern=pattern)
    extended = [{"attention-window": 16}, {"rotary-scaling": YARN}]
    args = extension_args(stdlib_data, tmp_path / "long", short, pos_emb="rotary", layer_pattern=extended)
    pretrain(args)
    _, loaded = evaluated_alone(str(tmp_path / "long" / "ckpt"))
    windowed, full = loaded.model.pos_embs
    torch.testing.assert_close(windowed.frequencies()[0].double(), float64_inverse_frequencies(10000),
                               rtol=1e-6, atol=0)
    expected, factor = transformers_yarn(4.0)
    torch.testing.assert_close(full.frequencies()[0].double(), expected.double(), rtol=1e-6, atol=0)
    assert full.frequencies()[1] == pytest.approx(factor, rel=1e-12)
    assert_same_logits(loaded, args)


@pytest.mark.parametrize("method", ["kerple_log", "alibi", "fox"])
def test_bias_methods_extend_with_no_change(method, stdlib_data, tmp_path):
    short = trained_short(stdlib_data, tmp_path / "short", pos_emb=method)
    args = extension_args(stdlib_data, tmp_path / "long", short, pos_emb=method)
    result = pretrain(args)
    assert math.isfinite(result.losses[1])
    config, loaded = evaluated_alone(str(tmp_path / "long" / "ckpt"))
    assert (config.pos_emb, config.seq_length) == (method, LONG)
    assert_same_logits(loaded, args)


def test_a_fine_tune_may_not_change_the_architecture(rotary_short, stdlib_data, tmp_path):
    with pytest.raises(CheckpointError) as err:
        pretrain(extension_args(stdlib_data, tmp_path, rotary_short, pos_emb="rotary", rotary_pct=0.5))
    message = str(err.value)
    assert "rotary-pct: checkpoint 1.0, this run 0.5" in message
    assert "may change only the lengths (seq-length), the attention window, rotary-scaling and rotary-emb-base." in message


def test_a_resume_may_not_change_the_rotary_base(rotary_short, stdlib_data, tmp_path):
    """Only a fine-tune starts from weights trained with another base; resuming (or evaluating) is refused."""
    with pytest.raises(CheckpointError, match="rotary-emb-base: checkpoint 10000, this run 500000"):
        pretrain(tiny_args(stdlib_data, tmp_path, load=rotary_short, pos_emb="rotary", rotary_emb_base=500000,
                           train_iters=3, **SMALL))


def test_an_extension_is_never_labelled_as_a_run_from_scratch():
    """Results of an extension stage never share a result file with those of a run trained from scratch
    with the same keys, nor with an extension of another checkpoint."""
    keys = NeoXArgs.trained_keys()
    scratch = {"pos_emb": "rotary", "seq_length": LONG, "load": "runs/rotary256/checkpoints", "finetune": False}
    extended = {**scratch, "load": "runs/rotary64/checkpoints", "finetune": True, "iteration": None}
    hashes = {config_hash(c, keys) for c in (scratch, extended, {**extended, "load": "runs/other64/checkpoints"},
                                             {**extended, "iteration": 300})}
    assert len(hashes) == 4
    assert config_hash(scratch, keys) == config_hash({**scratch, "load": "elsewhere"}, keys)  # a resume: one run
