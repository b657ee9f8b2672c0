"""`eval-documents: within`: only chunks that lie inside one document are scored, against a stream built
here with known document boundaries; the default (`cross`) is the paper's chunking, unchanged; the
choice is recorded in the result file and refused with `sliding`."""


def test_evaluate_py_scores_within_documents_and_records_it(stdlib_data, trained_tiny, tmp_path):
    import json

    from tests.support.training import TINY, run_script, set_flags, tiny_overrides
    # Any trained tiny model: the chunks scored depend on the stream, not the weights (tests/e2e/conftest.py).
    values = tiny_overrides(stdlib_data, tmp_path, eval_iters=0, load=str(trained_tiny))
    records = {}
    for documents in ("cross", "within"):
        folder = tmp_path / documents
        settings = {**values, "eval_lengths": "[64, 512]", "eval_chunks": None, "eval_documents": documents,
                    "eval_results_dir": str(folder)}
        if documents == "within":
            done = run_script(["evaluate.py", str(TINY), *set_flags(settings)], timeout=600)
            assert done.returncode == 0, done.stderr[-3000:]
        else:  # the default, as a reference: evaluate.py's own code in this process
            from megatron.evaluation.driver import evaluate_run
            from megatron.neox_arguments import NeoXArgs
            evaluate_run(NeoXArgs.from_ymls([TINY], {**settings, "eval_lengths": [64, 512]}).evaluation_run())
        (path,) = folder.glob("*.json")
        result = json.loads(path.read_text())
        assert result["evaluation"]["eval_documents"] == documents
        records[documents] = {r["length"]: r["chunks"] for r in result["results"]}
    for length in (64, 512):  # fewer chunks lie inside one document, and more so at the longer length
        assert 0 < records["within"][length] < records["cross"][length]
    assert records["within"][512] / records["cross"][512] < records["within"][64] / records["cross"][64]
