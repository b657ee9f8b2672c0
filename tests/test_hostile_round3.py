"""Hostile inputs, round 3 (issue 40): the rows about runs, results and config values -- an empty loss
mask is not a loss of zero, a NaN result is not a result, a step is the one its folder names, config
values are checked before anything is allocated from them, every message quotes at most 200
characters, a link loop is called one."""
import os

import numpy as np
import pytest

from test_hostile_config import assert_clear_error
from test_training_support import REPO_ROOT, TINY, child_environment, set_flags, tiny_overrides
from test_hostile_runs import script, train, evaluate

pytestmark = pytest.mark.launches  # every test here starts processes


def eod_only_data(folder):
    """A dataset whose every token is the end-of-document token (40 documents of 100)."""
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder
    from megatron.tokenizer import make_tokenizer

    eod = make_tokenizer("ByteLevelTokenizer", None, None).eod
    prefix = folder / "eod_text_document"
    builder = IndexedDatasetBuilder(str(prefix) + ".bin", dtype=np.uint16)
    for _ in range(40):
        builder.add_document(np.full(100, eod, dtype=np.uint16), [100])
    builder.finalize(str(prefix) + ".idx")
    return str(prefix)


@pytest.mark.parametrize("masking", [{}, {"reset_attention_mask": True}], ids=["eod-mask-loss", "with document masking"])
def test_an_empty_loss_mask_is_an_error_not_a_loss_of_zero(masking, tmp_path):
    result = train(eod_only_data(tmp_path), tmp_path, eod_mask_loss=True, **masking)
    assert result.returncode == 1, result.stdout[-2000:] + result.stderr[-2000:]
    assert "Traceback" not in result.stderr and "loss 0.0000" not in result.stdout
    assert ("error: every token of a training step's global batch is masked out of the loss (eod-mask-loss masks "
            "every end-of-document token") in result.stderr
    assert not (tmp_path / "ckpt" / "latest").exists()


# ------------------------------------------------------------------- checkpoints: step and weights
@pytest.fixture(scope="module")
def trained(stdlib_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("trained")
    result = train(stdlib_data, folder)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return folder / "ckpt"


def copied(trained, tmp_path):
    import shutil
    shutil.copytree(trained, tmp_path / "ckpt")
    return tmp_path / "ckpt"


def test_a_step_is_the_one_its_folder_names(trained, tmp_path):
    ckpt = copied(trained, tmp_path)
    (ckpt / "global_step2").rename(ckpt / "global_step600")
    (ckpt / "latest").write_text("global_step600")
    resolved = ckpt / "global_step600" / "resolved_config.yml"
    result = evaluate(resolved, load=str(ckpt), eval_results_dir=str(tmp_path / "results"))
    assert_clear_error(result, f"{ckpt / 'global_step600'} is the folder of step 600, but its model-states file "
                               "says iteration 2")
    assert not list(tmp_path.rglob("*.json"))


def test_weights_holding_nan_are_refused_not_scored(trained, tmp_path):
    import torch
    ckpt = copied(trained, tmp_path)
    path = ckpt / "global_step2" / "mp_rank_00_model_states.pt"
    state = torch.load(path, weights_only=False)
    name = next(k for k, v in state["module"].items() if v.is_floating_point())
    state["module"][name][0] = float("nan")
    torch.save(state, path)
    result = evaluate(ckpt / "global_step2" / "resolved_config.yml", load=str(ckpt),
                      eval_results_dir=str(tmp_path / "results"))
    assert_clear_error(result, f"the weights in {ckpt / 'global_step2'} hold NaN or inf (['{name}'])")
    assert not list((tmp_path).rglob("*.json"))
