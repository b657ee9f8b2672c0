"""Packed samples where processes start: FlexAttention's compiled kernel (g++) gives each document what it
gets alone, and a document-masked run trains and evaluates through train.py and evaluate.py. The masks,
positions and every other path: tests/data/test_packed_documents.py."""
import json

import pytest
import torch

from tests.support.packed_documents import alone_and_packed, model_of, packed_rows
from tests.support.training import TINY, run_script, set_flags, tiny_overrides


# The compiler runs g++.
@pytest.mark.parametrize("method", ["alibi", "kerple_log"])
def test_the_compiled_flex_path_gives_each_document_alone(method):
    """FlexAttention's compiled kernel (no backward on CPU: evaluation only) reads the per-row block mask."""
    model = model_of(method, attention_impl="flex").eval()
    with torch.no_grad():
        alone, packed = alone_and_packed(model, packed_rows())
    torch.testing.assert_close(packed, alone, atol=2e-5, rtol=0)


def test_a_document_masked_run_trains_and_evaluates_through_the_entry_points(stdlib_data, tmp_path):
    """train.py on packed samples with both keys, then evaluate.py at 1x and 4x, its results row apart from
    the plain method's (`docpos`), with chunks inside documents as well as across them. One process each, as
    `python train.py` runs: deepy.py's launch is tested by tests/e2e/run/test_deepy.py and adds ~8 s a command."""
    values = tiny_overrides(stdlib_data, tmp_path, reset_attention_mask=True, reset_position_ids=True,
                            eod_mask_loss=True, train_iters=3, eval_results_dir=str(tmp_path / "results"))
    trained = run_script(["train.py", "configs/tiny.yml", *set_flags(values)], timeout=600)
    assert trained.returncode == 0, trained.stdout[-2000:] + trained.stderr[-3000:]
    assert "global_step3" in trained.stdout and "valid at step 3" in trained.stdout, trained.stdout[-2000:]
    evaluation = {"eval_lengths": "[64,256]", "eval_chunks": 2}
    evaluated = run_script(["evaluate.py", "configs/tiny.yml", *set_flags(
        {**values, **evaluation, "eval_documents": "cross"})], timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    # Chunks inside documents: what evaluate.py runs, in this process (the launch above shows the entry point).
    from megatron.evaluation.driver import evaluate_run
    from megatron.neox_arguments import NeoXArgs
    evaluate_run(NeoXArgs.from_ymls([TINY], {**values, "eval_lengths": [64, 256], "eval_chunks": 2,
                                             "eval_documents": "within"}).evaluation_run())
    runs = [json.loads(path.read_text())["run"] for path in (tmp_path / "results").glob("*.json")]
    assert runs and all("docpos" in run["variant"] for run in runs)
    # The banner says that masking is on and how much of the data it changes (counted in-process:
    # tests/data/test_packed_documents.py).
    assert "pos-emb kerple_log + docpos, fp32" in trained.stdout, trained.stdout[:2000]
    assert ("document masking on (reset-attention-mask, positions restart in each document): "
            in trained.stdout), trained.stdout[:2000]
