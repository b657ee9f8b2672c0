"""The architecture rules that need a fresh interpreter, where the import order is the point (this one has
imported everything): importing an attention kernel builds no model, a config builds whichever of
generation's modules was imported first, and the config package loads megatron-core only when a DataRun is
asked for. The rules read from the source: tests/test_architecture_rules.py."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_importing_an_attention_kernel_does_not_build_the_model():
    probe = ("import sys, megatron.model.attention.cpu_flash, megatron.model.attention.choice; "
             "print(sorted(m for m in sys.modules if m.startswith('megatron') and 'attention' not in m))")
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert eval(loaded) == ["megatron", "megatron.compiled_code", "megatron.errors", "megatron.model"], loaded


# Modules a user or a tool may import first, before the config package: each sits on the path by which the
# config package, when it imports the evaluation modes, reaches back to generation (a mode's probe scoring
# generates). An import cycle through it leaves a mode file half-imported, and every later config build then
# fails on that mode.
FIRST_IMPORTS = ("megatron.text_generation.steps", "megatron.evaluation.retrieval.scoring")


@pytest.mark.parametrize("first", FIRST_IMPORTS)
def test_a_config_builds_whatever_was_imported_first(first):
    probe = (f"import {first}; from megatron.neox_arguments import NeoXArgs; "
             "args = NeoXArgs.from_dict({'train-micro-batch-size-per-gpu': 1, 'eval-modes': ['kv-retrieval']}); "
             "print(args.eval_modes)")
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "['kv-retrieval']", run.stderr[-2000:]


def test_the_config_package_imports_megatron_core_only_when_a_data_run_is_asked_for():
    """Entry points import the config package before run_cli checks the folder torch's compiler will write, which
    importing megatron-core creates: NeoXArgs.data_run() imports the data package (megatron-core's) when called."""
    probe = ("import sys; from megatron.neox_arguments import NeoXArgs; "
             "args = NeoXArgs.from_ymls(['configs/tiny.yml'], {}); args.generation_run(), args.inference_run(); "
             "print('megatron.core' in sys.modules); args.data_run(); print('megatron.core' in sys.modules)")
    loaded = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert loaded.split()[-2:] == ["False", "True"], loaded
