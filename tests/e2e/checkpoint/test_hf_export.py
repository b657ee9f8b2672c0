"""tools/ckpts/convert_to_hf.py as a user runs it: a kerple_log checkpoint saved by DeepSpeed's engine exports,
loads with transformers, generates and gives this project's logits at 4x the training length; and an export
loads in an isolated interpreter where this project is not installed. The export's checks for every method,
in-process: tests/checkpoint/test_hf_export.py."""
import subprocess
import sys

import torch
import transformers

from megatron.checkpoint.checkpointing import load_model_weights, save_checkpoint
from megatron.model import GPTModel
from megatron.neox_arguments.to_model import model_config
from megatron.tokenizer import build_tokenizer
from megatron.training.loop import setup_model_and_optimizer
from tests.support.hf_export import TRAIN_LENGTH, exported, load_export
from tests.support.training import REPO_ROOT, child_environment, tiny_args


def test_cli_exports_a_kerple_log_checkpoint_that_loads_and_generates(tmp_path):
    args = tiny_args("unused-data", tmp_path, hidden_size=32, num_attention_heads=2)
    args.join_process_group()
    engine = setup_model_and_optimizer(args.training_run(), build_tokenizer(args.tokenizer_run()).padded_vocab_size)[0]
    save_checkpoint(args.checkpoint_run(), engine, 3, 48)
    config = tmp_path / "run.yml"
    config.write_text(f"{{num-layers: 2, hidden-size: 32, num-attention-heads: 2, seq-length: 64, pos-emb: kerple_log, "
                      f"no-weight-tying: true, tokenizer-type: ByteLevelTokenizer, train_micro_batch_size_per_gpu: 1}}")
    done = subprocess.run([sys.executable, "tools/ckpts/convert_to_hf.py", "--input_dir", str(tmp_path / "ckpt/global_step3"),
                           "--config_file", str(config), "--output_dir", str(tmp_path / "hf")], cwd=REPO_ROOT,
                          env=child_environment(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    model = load_export(tmp_path / "hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf", trust_remote_code=True)
    ids = tokenizer("def main():\n    ", return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**ids, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > ids["input_ids"].shape[1]
    ours = GPTModel(model_config(args, build_tokenizer(args.tokenizer_run()).padded_vocab_size)).eval()
    load_model_weights(args.inference_run(), ours)
    tokens = torch.randint(0, 256, (1, 256))  # 4x the training length
    with torch.no_grad():
        torch.testing.assert_close(model(tokens).logits, ours(tokens), atol=1e-5, rtol=0)


def test_the_export_loads_where_this_project_is_not_installed(tmp_path):
    """An isolated interpreter (`-I`: no working directory, no PYTHONPATH on sys.path) in another folder
    loads the export, never imports this project, and gives the logits saved beside it."""
    source, folder = exported("kerple_log", tmp_path / "hf")
    ids = torch.randint(0, 256, (1, 4 * TRAIN_LENGTH), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.save({"ids": ids, "logits": source.model(ids)}, tmp_path / "expected.pt")
    script = ("import sys, torch, transformers\n"
              "model = transformers.AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()\n"
              "expected = torch.load(sys.argv[2])\n"
              "with torch.no_grad():\n"
              "    difference = float((model(expected['ids']).logits - expected['logits']).abs().max())\n"
              "project = sorted(m for m in sys.modules if m == 'megatron.errors' or m.startswith('megatron.model'))\n"
              "print('difference', difference, 'project modules', project)\n")
    done = subprocess.run([sys.executable, "-I", "-c", script, str(folder), str(tmp_path / "expected.pt")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={k: v for k, v in child_environment().items() if k != "PYTHONPATH"})
    assert done.returncode == 0, done.stderr[-3000:]
    difference = float(done.stdout.split("difference ")[1].split()[0])
    assert difference < 1e-5 and "project modules []" in done.stdout, done.stdout
