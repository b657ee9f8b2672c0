"""`rotary-scaling` (megatron/model/positional_embeddings/rope_scaling.py) against transformers'
RoPE utilities (the pinned version's ROPE_INIT_FUNCTIONS and Llama's rotary application), `factor: 1`
against plain rotary, the KV cache against recompute, and the config's errors."""
import pytest


@pytest.mark.parametrize("overrides, message", [
    # 64 / 4 heads = head dim 16, x 0.125 = 2 rotated dims: ntk's base ** (d / (d - 2)) has no value (it was a
    # ZeroDivisionError traceback in every rank).
    (["pos-emb=rotary", "rotary-pct=0.125", "rotary-scaling={type: ntk, factor: 4}"],
     "rotary-scaling type ntk needs at least 4 rotated dims per head"),
    (["pos-emb=stickbreaking", "attention-temperature={type: ssmax}"],
     "pos-emb 'stickbreaking' replaces the softmax"),
])
def test_dry_run_refuses_a_method_its_options_break_before_printing_anything(overrides, message):
    import subprocess
    import sys
    from tests.support.training import REPO_ROOT, child_environment
    flags = [arg for override in overrides for arg in ("--set", override)]
    done = subprocess.run([sys.executable, "deepy.py", "train.py", "configs/tiny.yml", *flags, "--dry-run"],
                          cwd=REPO_ROOT, env=child_environment(), capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and done.stdout == ""  # no config printed as if it were fine
    assert message in done.stderr and "Traceback" not in done.stderr, done.stderr
