"""`layer-pattern` (hybrid layers): the issue's three example patterns build, a hybrid model equals a model
assembled by hand from single-method models' layers and plans, every attention path agrees with a float64
forward, the KV cache generates like a full forward, the checkpoint's model config carries the pattern,
the Hugging Face export gives the same logits, and bad entries are one-paragraph errors."""
import json

import torch
import transformers
from tests.support.training import run_script, set_flags, tiny_overrides

from megatron.checkpoint.inference_model import load


def test_a_pattern_trains_evaluates_generates_and_exports_through_the_entry_points(stdlib_data, tmp_path):
    """ALiBi windowed / KERPLE-log global on configs/tiny.yml: train.py, evaluate.py at 4x, then generate.py
    and convert_to_hf.py with the checkpoint alone (the pattern comes from the checkpoint). One process each,
    as `python train.py` runs: deepy.py's launch is tested by tests/e2e/run/test_deepy.py and adds ~8 s a command."""
    pattern = "[{pos-emb: alibi, attention-window: 16}, {pos-emb: kerple_log}]"
    values = tiny_overrides(stdlib_data, tmp_path, pos_emb="kerple_log", layer_pattern=pattern, train_iters=6,
                            eval_results_dir=str(tmp_path / "results"))
    trained = run_script(["train.py", "configs/tiny.yml", *set_flags(values)], timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    evaluated = run_script(["evaluate.py", "configs/tiny.yml",
                            *set_flags({**values, "eval_lengths": "[64,256]", "eval_chunks": 2})], timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    (result,) = (tmp_path / "results").glob("*.json")
    run = json.loads(result.read_text())["run"]
    assert run["pos_emb"] == "kerple_log" and run["variant"].startswith("layers-")  # never the plain row
    generated = run_script(["generate.py", "configs/text_generation.yml", "--set", f"load={tmp_path / 'ckpt'}",
                            "--set", "maximum_tokens=200", "--set", "num-samples=1"], timeout=600)
    assert generated.returncode == 0, generated.stderr[-3000:]
    exported = run_script(["tools/ckpts/convert_to_hf.py", "--input_dir", str(tmp_path / "ckpt"), "--output_dir",
                           str(tmp_path / "hf")], timeout=600)
    assert exported.returncode == 0, exported.stderr[-3000:]
    ours = load(tmp_path / "ckpt", device="cpu", dtype=torch.float32).model.eval()
    assert [kind.describe() for kind in ours.layer_kinds] == ["alibi, window 16", "kerple_log"]
    theirs = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf", trust_remote_code=True).eval()
    tokens = torch.randint(0, 256, (1, 256), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        torch.testing.assert_close(theirs(tokens).logits, ours(tokens), atol=1e-5, rtol=0)


