"""flash-linear-attention's plain-torch references (`fla/ops/<op>/naive.py`, fla-core 0.6.0 in
requirements-dev.txt), loaded by path: importing the `fla` package itself pulls in its Triton kernels,
which a CPU machine may lack. A test that needs one skips with the reason when fla-core is absent."""
import importlib.util
from pathlib import Path

import pytest


def naive(op: str, function: str):
    """fla.ops.<op>.naive.<function>, or a skip saying why it is not there."""
    spec = importlib.util.find_spec("fla")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("fla-core (flash-linear-attention's ops, requirements-dev.txt) is not installed")
    path = Path(spec.submodule_search_locations[0]) / "ops" / op / "naive.py"
    if not path.is_file():
        pytest.skip(f"the installed fla-core has no {path}; requirements-dev.txt pins 0.6.0, which has it")
    module_spec = importlib.util.spec_from_file_location(f"fla_naive_{op}", path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    return getattr(module, function)
