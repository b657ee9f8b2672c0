"""`GPTModel(config: ModelConfig)`: a model is built and run from its config alone, written out as literals
(no run config anywhere), and a checkpoint's `model_config` record of the first format still reads."""
import subprocess
import sys
import textwrap


def test_building_a_model_from_its_config_imports_no_run_config():
    code = textwrap.dedent("""
        import sys, torch
        from megatron.model import GPTModel
        from megatron.model.model_config import ModelConfig
        config = ModelConfig(num_layers=1, hidden_size=16, num_attention_heads=2, intermediate_size=None,
                             padded_vocab_size=32, tokenizer_type="ByteLevelTokenizer", norm="rmsnorm",
                             layernorm_epsilon=1e-6, activation="swiglu", no_weight_tying=False, gpt_j_residual=True,
                             pos_emb="kerple_log", pos_emb_per_layer=False, layers=None,
                             attention_temperature=None)
        logits = GPTModel(config)(torch.tensor([[1, 2, 3]]))
        assert logits.shape == (1, 3, 32) and torch.isfinite(logits).all()
        print(sorted(m for m in sys.modules if m.startswith(("megatron.neox_arguments", "megatron.evaluation"))))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


