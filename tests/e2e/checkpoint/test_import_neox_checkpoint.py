"""tools/ckpts/import_neox.py as a user runs it: the imported fork checkpoint scores through evaluate.py what the
fork's forward (tests/support/neox_fork.py, float64) gives on the same chunks, and a broken checkpoint is one
paragraph with no traceback. The import's checks in-process: tests/checkpoint/test_import_neox_checkpoint.py."""
import json
import os
import pathlib
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

from megatron.neox_arguments import NeoXArgs
from megatron.tokenizer import build_tokenizer
from tests.support import neox_fork as fork
from tests.support.neox_fork import LENGTHS, fork_checkpoint

REPO = pathlib.Path(__file__).resolve().parents[3]


def test_evaluate_py_scores_the_imported_checkpoint_as_the_fork_would(tmp_path, stdlib_data):
    cfg, stages = fork_checkpoint(tmp_path, "kerple_log")
    result = subprocess.run([sys.executable, "-m", "tools.ckpts.import_neox", str(tmp_path / "fork"),
                             str(tmp_path / "ours")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "clamp bound" in result.stdout and "python evaluate.py" in result.stdout
    eval_config = tmp_path / "eval.yml"
    eval_config.write_text(json.dumps({"data-path": stdlib_data, "split": "90,5,5", "eval-lengths": list(LENGTHS),
                                       "eval-modes": ["nonoverlap"], "eval-chunks": 3,
                                       "eval-results-dir": str(tmp_path / "results")}))
    configs = sorted(str(p) for p in (tmp_path / "ours" / "global_step7" / "configs").glob("*.yml"))
    scored = subprocess.run([sys.executable, "evaluate.py", *configs, str(eval_config), "--set",
                             f"load={tmp_path / 'ours'}"], cwd=REPO, capture_output=True, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert scored.returncode == 0, scored.stdout[-2000:] + scored.stderr[-3000:]
    [path] = (tmp_path / "results").glob("*.json")
    document = json.loads(path.read_text())
    from megatron.data import build_evaluation_stream
    args = NeoXArgs.from_ymls([*configs, eval_config], world_size=1)
    stream = np.asarray(build_evaluation_stream(args.data_run(), "test", build_tokenizer(args.tokenizer_run())))
    for record in document["results"]:
        length = record["length"]
        for start, got in zip(record["chunk_starts"], record["chunk_losses"]):
            window = torch.from_numpy(stream[start:start + length + 1].astype(np.int64))
            expected = F.cross_entropy(fork.forward(stages, "kerple_log", cfg, window[:-1]), window[1:])
            assert abs(got - float(expected)) < 1e-5, (length, start, got, float(expected))


def test_the_command_prints_one_paragraph_and_no_traceback(tmp_path):
    fork_checkpoint(tmp_path, "t5")
    (tmp_path / "fork" / "global_step7" / "layer_00-model_00-model_states.pt").unlink()
    result = subprocess.run([sys.executable, "-m", "tools.ckpts.import_neox", str(tmp_path / "fork"),
                             str(tmp_path / "ours")], cwd=REPO, capture_output=True, text=True)
    assert result.returncode != 0 and "Traceback" not in result.stderr
    assert "layer_00-model_00-model_states.pt (the embedding)" in result.stderr
