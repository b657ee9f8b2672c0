"""lm-eval's built-in tasks read their data from the Hugging Face hub: where it cannot be reached, eval.py
says so in one paragraph, naming the local alternative, before the model loads (instead of minutes of
retries and a ConnectionError traceback). Local tasks (eval-task-paths) never need it."""
import pytest

from megatron.evaluation import lm_eval_run
from megatron.evaluation.run import EvaluationError


def test_an_unreachable_hub_is_one_paragraph_naming_the_local_alternative(monkeypatch):
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(lm_eval_run, "HUB", ("127.0.0.1", 9))  # a real connection, refused: nothing listens
    with pytest.raises(EvaluationError) as raised:
        lm_eval_run.check_hub_reachable(["lambada_openai"])
    message = str(raised.value)
    assert "lambada_openai read their data from the Hugging Face hub, and 127.0.0.1 cannot be reached" in message
    assert "eval-task-paths (docs/lm-eval.md" in message and "HF_DATASETS_OFFLINE=1" in message
    assert "\n" not in message


def test_offline_mode_and_local_tasks_skip_the_check(monkeypatch):
    monkeypatch.setattr(lm_eval_run, "HUB", ("127.0.0.1", 9))
    lm_eval_run.check_hub_reachable([])  # only local tasks: nothing to reach
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    lm_eval_run.check_hub_reachable(["lambada_openai"])  # the cache holds its data: datasets reads it there


def test_a_task_in_eval_task_paths_is_local(tmp_path):
    from lm_eval.tasks import TaskManager
    (tmp_path / "mine.yaml").write_text("task: mine\ndataset_path: json\noutput_type: loglikelihood\n"
                                        "doc_to_text: x\ndoc_to_target: y\n")
    manager = TaskManager(include_path=[str(tmp_path)], include_defaults=False)
    assert lm_eval_run.is_local_task(manager, "mine", [str(tmp_path)])
    assert not lm_eval_run.is_local_task(manager, "mine", [str(tmp_path / "elsewhere")])
