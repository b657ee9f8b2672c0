"""tools/ckpts/import_neox.py: checkpoints in the KERPLE fork's / GPT-NeoX's pipeline layout, written
from an independent float64 re-implementation of the fork's forward (tests/support/neox_fork.py), import
into this project's layout and score the same through the real loading code. Through the command and
evaluate.py: tests/e2e/checkpoint/test_import_neox_checkpoint.py."""
import json

import pytest
import torch
import torch.nn.functional as F

from tests.support import neox_fork as fork
from tests.support.neox_fork import LENGTHS, config, fork_checkpoint
from megatron.checkpoint.inference_model import load
from megatron.neox_arguments import NeoXArgsError
from tools.ckpts.neox_import import CheckpointImportError, import_checkpoint

METHODS = ("learned", "sinusoidal", "rotary", "t5", "alibi", "kerple_log", "kerple_power", "kerple_bias_weight")


def imported_model(root):
    loaded = load(root / "ours")  # the imported checkpoint alone describes the model
    return loaded.config, loaded.model, loaded.step


@pytest.mark.parametrize("method", METHODS)
def test_imported_model_matches_the_fork_forward_at_1x_and_8x(tmp_path, method):
    cfg, stages = fork_checkpoint(tmp_path, method)
    _, notes = import_checkpoint(tmp_path / "fork", tmp_path / "ours")
    config, model, step = imported_model(tmp_path)
    assert (config.pos_emb, step) == (method, 7)
    tokens = torch.randint(0, cfg["vocab"], (LENGTHS[-1] + 1,), generator=torch.Generator().manual_seed(1))
    for length in LENGTHS:
        window = tokens[:length + 1]
        expected = fork.forward(stages, method, cfg, window[:-1])
        with torch.no_grad():
            logits = model(window[None, :-1])[0].double()
        # fp32 against float64: logits agree to fp32 precision relative to their size, the loss to 1e-5
        relative = float((logits - expected).abs().max() / expected.abs().max())
        loss, expected_loss = F.cross_entropy(logits, window[1:]), F.cross_entropy(expected, window[1:])
        print(f"{method} L={length}: logits max rel diff {relative:.1e}, loss diff {float(loss - expected_loss):.1e}")
        assert relative < 3e-5, (method, length, relative)
        assert abs(float(loss - expected_loss)) < 1e-5, (method, length, float(loss), float(expected_loss))
    if method.startswith("kerple"):
        assert any("clamp bound" in note for note in notes)


# ------------------------------------------------------------------------------------------ bad input
def test_a_missing_layer_file_is_named(tmp_path):
    fork_checkpoint(tmp_path, "alibi")
    (tmp_path / "fork" / "global_step7" / "layer_03-model_00-model_states.pt").unlink()
    with pytest.raises(CheckpointImportError, match=r"missing \['layer_03-model_00-model_states.pt "
                                                    r"\(transformer layer 1\)'\]"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours")
    assert not (tmp_path / "ours").exists()


def test_a_tensor_of_the_wrong_shape_is_named_with_its_file(tmp_path):
    cfg, stages = config("kerple_log"), fork.make_weights("kerple_log", config("kerple_log"))
    stages[2]["attention.dense.weight"] = stages[2]["attention.dense.weight"][:, :16]
    fork.write_fork_checkpoint(tmp_path / "fork", stages, cfg, "kerple_log")
    with pytest.raises(CheckpointImportError, match=r"layer_03-model_00-model_states.pt: layers.1.attention.dense"
                                                    r".weight is \(32, 16\), the config's model needs \(32, 32\)"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours")


def test_a_kerple_parameter_of_the_wrong_shape_is_named(tmp_path):
    cfg, stages = config("kerple_power"), fork.make_weights("kerple_power", config("kerple_power"))
    for layer in stages[1:3]:
        layer["attention.rpe.bias_p"] = torch.ones(3, 1, 1)
    fork.write_fork_checkpoint(tmp_path / "fork", stages, cfg, "kerple_power")
    with pytest.raises(CheckpointImportError, match=r"attention.rpe.bias_p has shape \(3, 1, 1\), but the config "
                                                    r"has 4 heads"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours")


def test_an_unknown_positional_method_is_refused(tmp_path):
    fork_checkpoint(tmp_path, "kerple_log")
    with pytest.raises(CheckpointImportError, match=r"pos-emb 'fire' is not a positional method of GPT-NeoX or the "
                                                    r"KERPLE fork"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours", pos_emb="fire")
    with pytest.raises(NeoXArgsError, match=r"command line: pos-emb: unknown positional method 'kerple_cosine'"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours", pos_emb="kerple_cosine")


def test_weights_of_another_method_than_the_config_names_are_refused(tmp_path):
    fork_checkpoint(tmp_path, "alibi")
    wrong = tmp_path / "run.yml"  # a config naming another method than the run's
    wrong.write_text(json.dumps({**fork.fork_config("alibi", config("alibi")), "pos-emb": "kerple_log"}))
    with pytest.raises(CheckpointImportError, match=r"missing \['attention.rpe.bias_a', 'attention.rpe.bias_p'\], "
                                                    r"foreign \['attention.alibi_embed.slopes'\]"):
        import_checkpoint(tmp_path / "fork", tmp_path / "ours", [wrong])
