"""A sweep's `extensions` end to end: a base run and its fine-tune at a longer context trained, evaluated and
reported through the runner, then skipped by a second invocation (their planning, checks and report in-process:
tests/reproduce/test_reproduce_extensions.py)."""
import subprocess
import sys

import yaml

from tests.support.reproduce import REPO_ROOT, YARN, reproduce_here, write_corpus


def test_a_base_run_and_its_extension_end_to_end_then_skipped(tmp_path):
    """A 4-step base at 64 tokens and a 2-step YaRN extension to 256 (configs/tiny.yml, 2 layers): the
    extension's checkpoint records the longer length and the scaling; a second invocation launches nothing."""
    from megatron.evaluation.run import open_checkpoint  # the reader evaluate.py opens a checkpoint with
    write_corpus(tmp_path / "code.jsonl")
    sweep = {"name": "ext", "scale": "test", "profile": ["configs/tiny.yml"], "methods": ["rotary"], "seeds": [7],
             "datasets": ["code"], "data": {"code": {"source": str(tmp_path / "code.jsonl"),
                                                     "prefix": str(tmp_path / "data" / "code_text_document")}},
             "evaluation": {"eval-lengths": [64, 256], "eval-chunks": 2, "eval-split": "valid"},
             "set": {"train-iters": 4, "eval-interval": 4, "eval-iters": 1, "log-interval": 2, "checkpoint-factor": 4,
                     "split": "90,5,5", "train_micro_batch_size_per_gpu": 4},
             "extensions": {"rotary": {"yarn-256": {"seq-length": 256, "seq-length-val": 256, "train-iters": 2,
                                                    "train_micro_batch_size_per_gpu": 1, "rotary-scaling": YARN}}},
             "work_dir": str(tmp_path / "work"), "report_dir": str(tmp_path / "report")}
    (tmp_path / "sweep.yml").write_text(yaml.safe_dump(sweep))

    def reproduce():
        return subprocess.run([sys.executable, "-m", "tools.reproduce", str(tmp_path / "sweep.yml"), "--publish"],
                              cwd=REPO_ROOT, capture_output=True, text=True, timeout=400)
    first = reproduce()
    assert first.returncode == 0, first.stdout + first.stderr
    assert "[2/2] code/rotary+yarn-256/seed7:" in first.stdout
    work = tmp_path / "work/code"
    trained = open_checkpoint(work / "rotary+yarn-256/seed7/checkpoints").trained
    assert trained.step == 2 and trained.config["seq_length"] == 256 and trained.config["finetune"] is True
    assert trained.config["rotary_scaling"] == {"type": "yarn", "factor": 4, "original_max_position": 64}
    assert trained.config["load"] == str(work / "rotary/seed7/checkpoints")
    assert open_checkpoint(work / "rotary/seed7/checkpoints").trained.config["seq_length"] == 64
    report = (tmp_path / "report/report.md").read_text()
    assert "## Extensions beside their base model's zero-shot result" in report
    assert "| rotary+yarn-256 | rotary | 256 |" in report and "2 of 2 planned runs have results" in report

    second = reproduce_here(tmp_path / "sweep.yml")  # launches nothing: main() in this process
    assert second.returncode == 0, second.stdout + second.stderr
    assert "code/rotary/seed7: already finished" in second.stdout
    assert "code/rotary+yarn-256/seed7: already finished" in second.stdout
    assert (work / "rotary+yarn-256/seed7/train.log").read_text().count("\n$ ") == 1
