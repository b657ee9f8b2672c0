"""What every train.py / evaluate.py process imports: megatron-core's tensor-parallel stack (and Triton with it)
only when something asks for it, and then the package behaves as installed."""
import pathlib
import subprocess
import sys

REPO_ROOT = pathlib.Path(__file__).resolve().parents[3]


# a fresh interpreter: this test's own process has imported everything already
def test_the_training_stack_imports_without_megatron_cores_tensor_parallel_stack_until_asked():
    script = """
import sys
import megatron.training.loop, megatron.evaluation.driver
print(sorted(m for m in ("triton", "megatron.core.tensor_parallel", "megatron.core.parallel_state") if m in sys.modules))
from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
from megatron.core.utils import GlobalMemoryBuffer, log_single_rank
from megatron.core import mpu, parallel_state
import megatron.core
print(mpu is parallel_state, megatron.core.__version__ == megatron.core.package_info.__version__,
      GlobalMemoryBuffer.__module__, log_single_rank.__module__, "megatron.core.tensor_parallel" in sys.modules)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == [  # after DeepSpeed's accelerator notice
        "[]", "True True megatron.core.utils megatron.core._rank_utils True"]
