"""A new evaluation mode is one new file: docs/evaluation.md's example mode, saved into a folder of its own (named
by NEOX_EVAL_MODES_PATH), is accepted by the config, run by evaluate.py on a tiny checkpoint, written
into the result file and read by the table tool, with no other edit anywhere."""
import csv
import io
import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

from megatron.evaluation.modes import mode_names

REPO = pathlib.Path(__file__).resolve().parents[3]


def readme_example() -> str:
    section = REPO.joinpath("docs", "evaluation.md").read_text().split("## Adding an evaluation mode", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def run(argv, env):
    return subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "OMP_NUM_THREADS": "1", **env})


@pytest.fixture(scope="module")
def checkpoint(stdlib_data, trained_tiny, tmp_path_factory):
    """Any freshly trained tiny checkpoint (tests/e2e/conftest.py), read only: the results go to a folder here."""
    root = tmp_path_factory.mktemp("new_mode")
    config = root / "run.yml"
    config.write_text(json.dumps({
        "data-path": stdlib_data, "split": "90,8,2", "load": str(trained_tiny), "eval-iters": 0,
        "eval-results-dir": str(root / "results"), "eval-split": "valid", "eval-lengths": [64], "eval-chunks": 6,
        "attention-impl": "sdpa"}))
    modes = root / "modes"
    modes.mkdir()
    (modes / "tail.py").write_text(readme_example())
    return root, config, {"NEOX_EVAL_MODES_PATH": str(modes)}
def test_the_config_accepts_the_new_mode_only_once_its_file_is_found(checkpoint):
    from megatron.neox_arguments import NeoXArgs, NeoXArgsError
    root, config, env = checkpoint
    argv = ["deepy.py", "evaluate.py", "configs/tiny.yml", str(config), "--set", "eval-modes=[tail]", "--dry-run"]
    assert run(argv, env).returncode == 0
    if "tail" in mode_names():
        pytest.skip("megatron/evaluation/modes/tail.py exists (the example was added to the checkout), so "
                    "evaluate.py finds `tail` without NEOX_EVAL_MODES_PATH")
    # Without the folder (this process has no NEOX_EVAL_MODES_PATH): the config package refuses the mode, the check
    # deepy.py runs first (test_a_broken_mode_file_is_one_clear_error shows such a refusal through the entry point).
    with pytest.raises(NeoXArgsError) as without:
        NeoXArgs.from_ymls([REPO / "configs" / "tiny.yml", config], {"eval_modes": ["tail"]})
    assert f"unknown mode(s) ['tail']; choose from {list(mode_names())}" in str(without.value)
def test_evaluate_runs_the_new_mode_and_tables_read_it(checkpoint):
    root, config, env = checkpoint
    evaluated = run(["evaluate.py", "configs/tiny.yml", str(config), "--set", "eval-modes=[position, tail]"], env)
    assert evaluated.returncode == 0, evaluated.stdout[-3000:] + evaluated.stderr[-3000:]
    (path,) = (root / "results").glob("*.json")
    records = {r["mode"]: r for r in json.loads(path.read_text())["results"]}
    tail, position = records["tail"], records["position"]
    assert (tail["length"], tail["tail_positions"], tail["chunks"], tail["tokens"]) == (64, 16, 6, 6 * 16)
    # Independent check: the tail's loss is the position-wise curve's mean over its last 16 positions.
    assert tail["loss"] == pytest.approx(np.mean(position["position_loss"][-16:]), rel=1e-6)
    assert tail["ppl"] == pytest.approx(np.exp(tail["loss"]))

    table = run(["-m", "tools.analysis.make_tables", str(root / "results"), "--mode", "tail", "--format", "csv"], env)
    assert table.returncode == 0, table.stderr
    (row,) = csv.DictReader(io.StringIO(table.stdout.split("\n\n")[0]))
    assert (row["mode"], row["method"], int(row["length"])) == ("tail", "kerple_log", 64)
    assert float(row["ppl_mean"]) == pytest.approx(tail["ppl"])
def test_a_broken_mode_file_is_one_clear_error(tmp_path):
    (tmp_path / "broken.py").write_text("def score(context:\n")
    result = run(["deepy.py", "evaluate.py", "configs/tiny.yml", "--dry-run"], {"NEOX_EVAL_MODES_PATH": str(tmp_path)})
    assert result.returncode != 0
    assert "evaluation mode file broken.py" in result.stderr and "could not be loaded: SyntaxError" in result.stderr
    assert "Traceback" not in result.stderr


# Not named `tail`: docs/evaluation.md's example mode, which a reader may have saved into the modes folder.
MODE_WITH_AN_OPTION = """
from dataclasses import dataclass

from megatron.evaluation.modes import register
from megatron.model.positional_embeddings import option


@dataclass
class Options:
    last_n_tokens: int = option(8, "`last_n`: the last tokens of each chunk it scores.",
                              check=lambda n: None if n > 0 else f"must be a positive integer, got {n}.")


@register("last_n", "the loss of the last last-n-tokens targets", options=Options)
def score(context) -> dict:
    return {}
"""
def test_a_mode_declares_its_options_in_its_own_file(tmp_path):
    (tmp_path / "last_n.py").write_text(MODE_WITH_AN_OPTION)
    env = {"NEOX_EVAL_MODES_PATH": str(tmp_path)}
    bad = tmp_path / "bad.yml"
    bad.write_text("eval-modes: [last_n]\nlast-n-tokens: 0\n")
    refused = run(["deepy.py", "evaluate.py", "configs/tiny.yml", str(bad), "--dry-run"], env)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert f"error: {bad}:2: last-n-tokens: must be a positive integer, got 0." in refused.stderr
    good = run(["deepy.py", "evaluate.py", "configs/tiny.yml", "--set", "last-n-tokens=3", "--dry-run"], env)
    assert good.returncode == 0, good.stderr
    assert re.search(r"^last_n_tokens +3 +# command line$", good.stdout, re.M), good.stdout[-2000:]
    reference = run(["tools/docs/config_reference.py"], env).stdout
    assert "| `last-n-tokens` | `8` | `last_n`: the last tokens of each chunk it scores. |" in reference
    # Without the folder (this process), the mode's file is not found: no such key.
    from megatron.neox_arguments import NeoXArgs, NeoXArgsError
    with pytest.raises(NeoXArgsError, match="'last_n_tokens' is not a known config key"):
        NeoXArgs.from_ymls([REPO / "configs" / "tiny.yml"], {"last_n_tokens": 3})
