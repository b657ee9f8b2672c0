"""Where each shipped config keeps its checkpoints: every paper config a folder of its own, so training one
method after another never resumes or refuses the other's; tiny.yml none (a run names its run-dir, which
files its checkpoints, logs, TensorBoard and results); an evaluation's results beside what it loads."""


def test_a_run_files_itself_and_its_checkpoint_evaluated_alone_writes_beside_it(stdlib_data, tmp_path):
    """train.py with run-dir (and nothing else naming a folder), then evaluate.py given only that run's
    checkpoint folder: every output lands in the one run folder, and the banner names the run."""
    from tests.support.training import run_script, set_flags
    run = tmp_path / "runs" / "masked"
    trained = run_script(["train.py", "configs/tiny.yml", *set_flags({
        "data_path": stdlib_data, "split": "90,8,2", "run_dir": str(run), "run_name": "KERPLE-log, masked",
        "reset_attention_mask": True, "attention_window": 32, "train_iters": 2, "eval_iters": 1})], timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    banner = trained.stdout.splitlines()[:3]
    assert banner[0] == f'run: "KERPLE-log, masked", filed in {run}'
    assert banner[1].startswith("model: 149,256 parameters, pos-emb kerple_log + docmask + window 32, fp32")
    assert banner[2].startswith("document masking on (reset-attention-mask): ")
    evaluated = run_script(["evaluate.py", *set_flags({"load": str(run / "checkpoints"), "eval_lengths": "[64]",
                                                       "eval_chunks": 2})], timeout=600)
    assert evaluated.returncode == 0, evaluated.stderr[-3000:]
    assert sorted(p.name for p in run.iterdir()) == ["checkpoints", "eval_results", "logs", "tensorboard"]
    assert len(list((run / "eval_results").glob("*.json"))) == 1
