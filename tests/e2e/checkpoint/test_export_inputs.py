"""convert_to_hf.py reads what the checkpoint says (issue 24, rows 10 and 27): a `save` folder as
--input_dir exports its latest step with the run's resolved config (a method chosen with `--set`
included), and a per-run choice (rotary-scaling) is exported with the run rather than written into
config.json and silently dropped."""
import json
import subprocess
import sys

import torch
import transformers

from megatron.checkpoint.inference_model import load

from tests.support.training import REPO_ROOT, child_environment, pretrain, tiny_args


def run(args):
    return subprocess.run([sys.executable, *args], cwd=REPO_ROOT, env=child_environment(), capture_output=True,
                          text=True, timeout=600)


def train(stdlib_data, folder, **overrides):
    """Two steps of configs/tiny.yml with `overrides`, as train.py trains them (tests/support/training.py's
    pretrain, in this process: the export, not the training, is what these tests launch)."""
    values = dict(train_iters=2, eval_iters=0, checkpoint_factor=2, **overrides)
    pretrain(tiny_args(stdlib_data, folder, **values))
    return folder / "ckpt"


def test_a_save_folder_exports_its_latest_step_with_the_method_set_on_the_command_line(trained_tiny_alibi, tmp_path):
    save = trained_tiny_alibi  # train.py configs/tiny.yml (kerple_log) --set pos-emb=alibi (tests/e2e/conftest.py)
    done = run(["tools/ckpts/convert_to_hf.py", "--input_dir", str(save), "--output_dir", str(tmp_path / "hf")])
    assert done.returncode == 0, done.stderr[-3000:]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["pos_emb"] == "alibi" and config["num_hidden_layers"] == 2


def test_rotary_scaling_is_exported_with_the_run_not_dropped(stdlib_data, tmp_path):
    """The run's rotary-scaling reaches the export: as transformers' rope_parameters where it has the type
    (linear here), and the export's logits are those of the scaled model, not of plain rotary."""
    save = train(stdlib_data, tmp_path, pos_emb="rotary", rotary_scaling={"type": "linear", "factor": 2.0})
    done = run(["tools/ckpts/convert_to_hf.py", "--input_dir", str(save / "global_step2"),
                "--output_dir", str(tmp_path / "hf")])
    assert done.returncode == 0, done.stderr[-3000:]
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["architectures"] == ["GPTNeoXForCausalLM"]
    assert config["rope_parameters"]["rope_type"] == "linear" and config["rope_parameters"]["factor"] == 2.0
    ours = load(save, device="cpu", dtype=torch.float32).model.eval()
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    ids = torch.randint(0, 256, (1, 256), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(theirs(ids).logits, ours(ids), atol=1e-5, rtol=0)
