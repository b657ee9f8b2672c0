"""A checkpoint describes its own model (ModelConfig, megatron/model/model_config.py) and one loader builds it
(megatron.checkpoint.inference_model.load): evaluate.py, generate.py, eval.py and convert_to_hf.py need only the
checkpoint. The run is trained with `--set pos-emb=alibi` over configs/tiny.yml (which says kerple_log), so
a model rebuilt from anything but the checkpoint would be the wrong method."""
import json
import pickle

import pytest
import torch

from megatron.checkpoint.folder import CheckpointError
from megatron.checkpoint.checkpointing import load_model_weights
from megatron.checkpoint.inference_model import load
from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.model.model_config import ModelConfig
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.tokenizer import build_tokenizer
from tests.support.training import EVAL_TINY, REPO_ROOT, TINY, child_environment, tiny_args

MODEL_STATES = "mp_rank_00_model_states.pt"


@pytest.fixture(scope="module")
def alibi_run(trained_tiny_alibi):
    """`python train.py configs/tiny.yml --set pos-emb=alibi ...`: 2 steps, saved in <folder>/ckpt, trained once
    per test run (tests/e2e/conftest.py). A test that changes the checkpoint changes a copy."""
    return trained_tiny_alibi


def reference_model(stdlib_data, ckpt):
    """The trained model built from the training config itself, weights straight from the file."""
    args = tiny_args(stdlib_data, ckpt.parent, pos_emb="alibi")
    model = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size))
    model.load_state_dict(torch.load(ckpt / "global_step2" / MODEL_STATES, weights_only=False)["module"])
    return model.eval()


def assert_same_model(model, reference):
    tokens = torch.randint(0, 256, (2, 96))  # past the training length (64)
    with torch.no_grad():
        assert torch.equal(model(tokens), reference(tokens))
    assert model.state_dict().keys() == reference.state_dict().keys()


def old_layout(ckpt, keep_resolved=True):
    """Rewrite the checkpoint as the code before ModelConfig wrote it: `model_config` the flat dict of
    the architecture, length and option keys, no schema, no tokenizer files (and, optionally, no
    resolved_config.yml, as checkpoints before that file)."""
    path = ckpt / "global_step2" / MODEL_STATES
    state = torch.load(path, weights_only=False)
    old = ("num_layers", "hidden_size", "num_attention_heads", "intermediate_size", "padded_vocab_size",
           "tokenizer_type", "norm", "layernorm_epsilon", "activation", "no_weight_tying", "gpt_j_residual",
           "pos_emb", "pos_emb_per_layer", "seq_length", "max_position_embeddings", "seq_length_val",
           "attention_window")
    state["model_config"] = {key: state["model_config"][key] for key in old}
    torch.save(state, path)
    if not keep_resolved:
        (ckpt / "global_step2" / "resolved_config.yml").unlink()
    return state["model_config"]


# ---------------------------------------------------------------------------------- in process
def test_load_builds_the_trained_model_from_the_checkpoint_alone(alibi_run, stdlib_data):
    reference = reference_model(stdlib_data, alibi_run)
    for where in (alibi_run, alibi_run / "global_step2"):
        loaded = load(where)
        assert (loaded.model.config.pos_emb, loaded.config.pos_emb, loaded.step) == ("alibi", "alibi", 2)
        assert loaded.config == model_config(tiny_args(stdlib_data, alibi_run.parent, pos_emb="alibi"),
                                                      reference.vocab_size)
        assert next(loaded.model.parameters()).dtype == torch.float32 and not loaded.model.training
        assert_same_model(loaded.model, reference)
def test_load_reads_the_checkpoint_once_and_returns_its_training_record(alibi_run, monkeypatch):
    from megatron.checkpoint import checkpointing, inference_model
    reads, read = [], checkpointing.read_client_state
    counted = lambda *args: reads.append(args) or read(*args)  # noqa: E731 (the real reader, counted)
    for module in (checkpointing, inference_model):
        monkeypatch.setattr(module, "read_client_state", counted)
    loaded = load(alibi_run, device="cpu")
    assert len(reads) == 1, reads
    trained = loaded.trained
    assert (trained.step, trained.config["pos_emb"], trained.config["seq_length"]) == (2, "alibi", 64)
    assert trained.consumed_train_samples == 2 * trained.config["train_batch_size"]
    assert loaded.model.config == loaded.config and loaded.model.position_limit() is None  # alibi: any length
def test_the_checkpoint_records_a_versioned_flat_model_config(alibi_run):
    record = torch.load(alibi_run / "global_step2" / MODEL_STATES, weights_only=False)["model_config"]
    assert record["schema"] == 2
    assert (record["pos_emb"], record["num_layers"], record["hidden_size"], record["tokenizer_type"]) == \
        ("alibi", 2, 64, "ByteLevelTokenizer")
    assert record["padded_vocab_size"] == 384  # 258 byte-level tokens padded to a multiple of 128
    assert ModelConfig.from_record(record).record() == record
    pickle.dumps(record)  # plain values only: a checkpoint never needs this module to be unpickled
def test_a_config_without_model_keys_takes_them_from_the_checkpoint(alibi_run):
    args = NeoXArgs.from_ymls([EVAL_TINY], {"load": str(alibi_run / "global_step2"), "attention_window": 32})
    assert (args.load, args.iteration) == (str(alibi_run), 2)
    assert (args.pos_emb, args.num_layers, args.hidden_size, args.seq_length) == ("alibi", 2, 64, 64)
    resolved = alibi_run / "global_step2" / "resolved_config.yml"
    assert args.config_sources["pos_emb"].startswith(f"checkpoint {resolved}:")
    assert args.config_sources["attention_window"] == "command line"  # per-run: never from the checkpoint
    assert args.eval_lengths == [64, 128, 256, 512, 1024, 2048]  # the evaluation's own config kept
    # A model config given as well wins where it speaks, and the loader names the disagreement.
    kerple = NeoXArgs.from_ymls([TINY, EVAL_TINY], {"load": str(alibi_run)})
    with pytest.raises(CheckpointError, match=r"pos-emb: checkpoint 'alibi', this run 'kerple_log'"):
        load(kerple.load, kerple.inference_run())
    with pytest.raises(NeoXArgsError, match=r"load names the checkpoint folder .*global_step2 \(step 2\) but "
                                            r"iteration is 1"):
        NeoXArgs.from_ymls([EVAL_TINY], {"load": str(alibi_run / "global_step2"), "iteration": 1})
def test_checkpoints_written_before_model_config_still_load(alibi_run, stdlib_data, tmp_path):
    import shutil
    reference = reference_model(stdlib_data, alibi_run)
    ckpt = tmp_path / "ckpt"
    shutil.copytree(alibi_run, ckpt)
    old = old_layout(ckpt)
    assert "schema" not in old and ModelConfig.from_record(old).pos_emb == "alibi"
    args = tiny_args(stdlib_data, tmp_path, pos_emb="alibi")
    assert load_model_weights(args.inference_run(), GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size))) == 2
    assert_same_model(load(ckpt).model, reference)
    with pytest.raises(CheckpointError, match=r"made by a different model: pos-emb: checkpoint 'alibi', this run "
                                              r"'kerple_log'\. Load it with the config it was trained with"):
        load(ckpt, tiny_args(stdlib_data, tmp_path).inference_run())
    old_layout(ckpt, keep_resolved=False)  # older still: the model record alone rebuilds it
    assert_same_model(load(ckpt).model, reference)
    args = NeoXArgs.from_ymls([EVAL_TINY], {"load": str(ckpt)})  # no model in the config: the record gives it
    assert args.config_sources["pos_emb"] == f"checkpoint {ckpt / 'global_step2'} (model_config)"
    assert_same_model(load(args.load, args.inference_run()).model, reference)
    state = torch.load(ckpt / "global_step2" / MODEL_STATES, weights_only=False)
    torch.save({k: v for k, v in state.items() if k != "model_config"}, ckpt / "global_step2" / MODEL_STATES)
    with pytest.raises(CheckpointError, match=r"global_step2 keeps no resolved_config.yml, and the config gives no "
                                              r"model .* was not written by this project's train.py .* Give the run's "
                                              r"own config files too"):
        NeoXArgs.from_ymls([EVAL_TINY], {"load": str(ckpt)})


# ----------------------------------------------------------------------------- the four commands
def script(*argv):
    import subprocess
    import sys
    return subprocess.run([sys.executable, *map(str, argv)], cwd=REPO_ROOT, env=child_environment(),
                          capture_output=True, text=True, timeout=600)
def test_evaluate_needs_only_the_checkpoint(alibi_run, tmp_path, capsys):
    result = script("evaluate.py", EVAL_TINY, "--set", f"load={alibi_run}", "--set", f"eval-results-dir={tmp_path}",
                    "--set", "eval-lengths=[64, 128]", "--set", "eval-modes=[nonoverlap]", "--set", "eval-chunks=2")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (path,) = tmp_path.glob("*.json")
    run = json.loads(path.read_text())["run"]
    assert (run["pos_emb"], run["checkpoint_step"], run["train_length"], run["num_layers"]) == ("alibi", 2, 64, 2)
    # deepy.py's dry run in this process (it launches nothing; tests/e2e/run/test_deepy.py launches one).
    import deepy
    capsys.readouterr()
    assert deepy.main([str(REPO_ROOT / "evaluate.py"), str(EVAL_TINY), "--set", f"load={alibi_run / 'global_step2'}",
                       "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert f"checkpoint {alibi_run / 'global_step2' / 'resolved_config.yml'}:" in dry.out + dry.err
def test_generate_needs_only_the_checkpoint(alibi_run):
    config = REPO_ROOT / "configs" / "text_generation.yml"
    result = script("generate.py", config, "--set", f"load={alibi_run / 'global_step2'}", "--set", "num-samples=1",
                    "--set", "maximum_tokens=8")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert f"generating with alibi ({alibi_run}, step 2)" in result.stderr
def test_eval_needs_only_the_checkpoint(alibi_run, tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "mc.jsonl").write_text(json.dumps({"question": "def add(a, b):\n    return a", "choices": [" + b", " ]]"],
                                                "answer": 0}) + "\n")
    (tasks / "local_mc.yaml").write_text(
        f"task: local_mc\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {tasks / 'mc.jsonl'}\n"
        "test_split: test\noutput_type: multiple_choice\ndoc_to_text: '{{question}}'\ndoc_to_choice: '{{choices}}'\n"
        "doc_to_target: '{{answer}}'\nmetric_list:\n  - metric: acc\n")
    result = script("eval.py", "--set", f"load={alibi_run}", "--eval_tasks", "local_mc", "--set",
                    f"eval-task-paths=[{tasks}]", "--set", f"eval-results-dir={tmp_path / 'results'}")
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    (path,) = (tmp_path / "results" / "lm_eval").glob("*.json")
    document = json.loads(path.read_text())
    assert (document["run"]["pos_emb"], document["run"]["checkpoint_step"]) == ("alibi", 2)
    assert "local_mc" in document["results"]
def test_convert_to_hf_needs_only_the_checkpoint(alibi_run, tmp_path):
    # A step folder here; the save folder (its latest step) of the same checkpoint, given alone too:
    # tests/e2e/checkpoint/test_export_inputs.py::test_a_save_folder_exports_its_latest_step_with_the_method_set_on_the_command_line.
    out = tmp_path / "step2"
    result = script("tools/ckpts/convert_to_hf.py", "--input_dir", alibi_run / "global_step2", "--output_dir", out)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    config = json.loads((out / "config.json").read_text())
    assert "alibi" in json.dumps(config), config
def test_plot_kernels_needs_only_the_checkpoint(alibi_run, tmp_path, capsys):
    from tools.analysis.plot_kernels import main
    main(["--set", f"load={alibi_run}", "--out", str(tmp_path / "kernel")])
    assert capsys.readouterr().out.split() == ["wrote", str(tmp_path / "kernel.png"), "wrote", str(tmp_path / "kernel.pdf")]
    assert (tmp_path / "kernel.png").stat().st_size > 0
def test_an_explicit_dtype_overrides_the_rule(alibi_run, stdlib_data):
    loaded = load(alibi_run, device="cpu", dtype=torch.float64)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float64}
    reference = reference_model(stdlib_data, alibi_run)
    tokens = torch.randint(0, 256, (1, 80))
    with torch.no_grad():
        torch.testing.assert_close(loaded.model(tokens).float(), reference(tokens), rtol=1e-5, atol=1e-5)
