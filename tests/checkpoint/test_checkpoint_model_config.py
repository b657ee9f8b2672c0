"""A checkpoint describes its own model (ModelConfig, megatron/model/model_config.py) and one loader builds it
(megatron.checkpoint.inference_model.load): evaluate.py, generate.py, eval.py and convert_to_hf.py need only the
checkpoint. The run is trained with `--set pos-emb=alibi` over configs/tiny.yml (which says kerple_log), so
a model rebuilt from anything but the checkpoint would be the wrong method."""

import pytest
import torch

from megatron.checkpoint.folder import CheckpointError
from megatron.neox_arguments.to_model import model_config
from megatron.model.model_config import ModelConfig, differences
from megatron.neox_arguments import NeoXArgs
from tests.support.training import EVAL_TINY, tiny_args


def test_a_config_without_a_model_names_the_missing_checkpoint(tmp_path):
    with pytest.raises(CheckpointError, match=r"^command line: the config gives no model \(num-layers, pos-emb, "
                                              r"\.\.\.\), so it comes from the checkpoint `load` names, but "
                                              r"checkpoint directory .*missing \(config key `load`\) does not exist"):
        NeoXArgs.from_ymls([EVAL_TINY], {"load": str(tmp_path / "missing")})


def test_differences_name_every_key_in_the_old_words(tmp_path):
    stdlib_data = "unused-data"
    args = tiny_args(stdlib_data, tmp_path)
    saved = model_config(tiny_args(stdlib_data, tmp_path, num_layers=3, hidden_size=32), 384)
    assert differences(saved, model_config(args, 256)) == [
        "num-layers: checkpoint 3, this run 2", "hidden-size: checkpoint 32, this run 64",
        "padded-vocab-size: checkpoint 384, this run 256"]
    learned = tiny_args(stdlib_data, tmp_path, pos_emb="learned", max_position_embeddings=128)
    longer = tiny_args(stdlib_data, tmp_path, pos_emb="learned", max_position_embeddings=256)
    assert differences(model_config(learned, 384), model_config(longer, 384)) == [
        "max-position-embeddings: checkpoint 128, this run 256"]
    assert differences(model_config(args, 384), model_config(
        tiny_args(stdlib_data, tmp_path, seq_length=256, attention_window=64), 384)) == []  # lengths are free
    # A record of schema 1 lacks nothing that is compared: the same model reads as the same.
    old = {k: v for k, v in model_config(args, 384).record().items()
           if k not in ("schema", "vocab_file", "merge_file")}
    assert differences(ModelConfig.from_record(old), model_config(args, 384)) == []


def test_one_device_and_dtype_rule(tmp_path):
    from megatron.checkpoint.inference_model import inference_device_and_dtype
    bf16 = tiny_args("unused-data", tmp_path, precision="bf16")
    assert inference_device_and_dtype(bf16.inference_run(), "cuda:0") == (torch.device("cuda:0"), torch.bfloat16)
    assert inference_device_and_dtype(bf16.inference_run(), "cpu") == (torch.device("cpu"), torch.float32)  # CPU runs fp32
    fp32 = tiny_args("unused-data", tmp_path)
    assert inference_device_and_dtype(fp32.inference_run(), "cuda:1") == (torch.device("cuda:1"), torch.float32)
    if not torch.cuda.is_available():
        assert inference_device_and_dtype(bf16.inference_run()) == (torch.device("cpu"), torch.float32)


def test_a_zero3_step_pruned_before_its_partitions_are_read_is_called_pruned(tmp_path):
    """load() reads a ZeRO-3 step's partitions (DeepSpeed's zero_to_fp32) after its model-states file: a step that
    is gone by then was pruned by the run saving into that folder, and is called so, not a raw FileNotFoundError."""
    from megatron.checkpoint.checkpointing import load_weights
    save = tmp_path / "ckpt"
    save.mkdir()
    (save / "latest").write_text("global_step3")  # the run saved step 3 and pruned step 2
    state = {"ds_config": {"zero_optimization": {"stage": 3}}, "iteration": 2}  # step 2's model states, read before
    with pytest.raises(CheckpointError) as info:
        load_weights(state, save / "global_step2", torch.nn.Linear(2, 2))
    assert str(info.value) == (f"{save / 'global_step2'} was removed while it was being read: the run writing {save} "
                               "keeps only its newest checkpoints (keep-last-n-checkpoints) and pruned it. Run again to "
                               "load the newest ('global_step3'), or set `iteration` to a step that is kept.")
