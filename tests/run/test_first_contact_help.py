"""First contact (issue 23 items 9 and 10): each entry point's --help says what it does, gives an
example command and lists its main keys with the defaults of the typed config groups; eval.py's lists
--eval_tasks; and README's local lm-eval task example runs as written against a freshly trained
tiny checkpoint."""
import dataclasses
import importlib.util
import json
import subprocess
import sys

import pytest

from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.neox_arguments.entry_points import ENTRY_POINTS, argument_parser, field_default
from tests.support.training import REPO_ROOT, TINY, child_environment

SCRIPTS = ("train.py", "evaluate.py", "generate.py", "eval.py")


def docstring(script: str) -> str:
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py") + "_for_help", REPO_ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the entry points import their stacks inside main() only
    return module.__doc__


def help_of(script: str) -> str:
    return argument_parser(script, docstring(script)).format_help()


def test_every_entry_point_has_main_keys_that_exist():
    assert set(ENTRY_POINTS) == set(SCRIPTS)
    known = NeoXArgs.user_keys()
    for script, entry in ENTRY_POINTS.items():
        missing = [k for k in entry.keys if k.replace("-", "_") not in known]
        assert not missing, f"{script}: {missing}"


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_says_what_it_does_an_example_and_the_main_keys_with_their_defaults(script):
    text = help_of(script)
    assert "main config keys" not in argument_parser("some_tool.py", None).format_help()
    first_line = docstring(script).strip().splitlines()[0]
    assert first_line in text and "examples:" in text and f"python {script} configs/" in text
    fields = NeoXArgs.user_keys()
    for key in ENTRY_POINTS[script].keys:
        default = field_default(fields[key.replace("-", "_")])
        assert f"  {key} (default {'none' if default is None else json.dumps(default)})" in text, key
    others = set(SCRIPTS) - {script}
    assert all(f"python {other} configs/" not in text for other in others)


def test_the_defaults_in_the_help_are_the_groups_defaults():
    """Spot checks against groups.py, so a restated default would be caught."""
    assert "  train-iters (default 1000)" in help_of("train.py")
    assert '  eval-modes (default ["nonoverlap"])' in help_of("evaluate.py")
    assert "  maximum-tokens (default 64)" in help_of("generate.py")
    assert '  eval-results-dir (default "eval_results")' in help_of("eval.py")
    assert dataclasses.is_dataclass(NeoXArgs)


def test_eval_py_help_lists_its_own_flags():
    text = help_of("eval.py")
    assert "--eval_tasks TASK [TASK ...]" in text
    for key in ("eval-tasks", "eval-task-paths", "eval-task-length", "eval-task-limit", "eval-task-num-fewshot"):
        assert f"  {key} (default" in text
    assert "--eval_tasks" not in help_of("train.py")


def test_eval_tasks_flag_sets_the_key_and_may_not_repeat_set(monkeypatch):
    monkeypatch.setattr(sys.modules["__main__"], "__file__", str(REPO_ROOT / "eval.py"), raising=False)
    args = NeoXArgs.consume_args([str(TINY), "--eval_tasks", "a", "b"])
    assert args.eval_tasks == ["a", "b"] and args.config_sources["eval_tasks"] == "command line"
    with pytest.raises(NeoXArgsError, match="eval-tasks is given both by its own flag and by --set; give it once"):
        NeoXArgs.consume_args([str(TINY), "--eval_tasks", "a", "--set", "eval_tasks=[b]"])


@pytest.mark.launches
@pytest.mark.parametrize("script", SCRIPTS)
def test_help_of_each_entry_point_is_its_own(script):
    done = subprocess.run([sys.executable, script, "--help"], cwd=REPO_ROOT, env=child_environment(),
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert "examples:" in done.stdout and "main config keys" in done.stdout
    assert docstring(script).strip().splitlines()[0] in done.stdout
    if script == "eval.py":
        assert "--eval_tasks" in done.stdout and "eval-task-paths (default none)" in done.stdout


# ------------------------------------------------------------------- README's local lm-eval task
TASK_FILE = """\
task: python_mc
dataset_path: json
dataset_kwargs:
  data_files:
    test: my_tasks/python_mc.jsonl
test_split: test
output_type: multiple_choice
doc_to_text: "{{question}}"
doc_to_choice: "{{choices}}"
doc_to_target: "{{answer}}"
metric_list:
  - metric: acc
    aggregation: mean
    higher_is_better: true
"""
DATA_FILE = """\
{"question": "def add(a, b):\\n    return a", "choices": [" + b", " / []", " if else"], "answer": 0}
{"question": "for i in range(10):\\n    print(", "choices": ["i)", "]]:", "def)"], "answer": 0}
{"question": "import os\\nprint(os.", "choices": ["getcwd())", "(((", "}}}"], "answer": 0}
"""
COMMAND = ("python eval.py configs/tiny.yml --set load=checkpoints/tiny/kerple_log --eval_tasks python_mc "
           "--set 'eval-task-paths=[my_tasks]'")


def test_readme_holds_the_local_task_example_as_tested_here():
    guide = (REPO_ROOT / "docs" / "lm-eval.md").read_text()
    for text in (TASK_FILE, DATA_FILE, COMMAND):
        assert text in guide, f"docs/lm-eval.md lacks:\n{text}"


@pytest.mark.launches
def test_the_local_task_example_runs_against_a_freshly_trained_checkpoint(tmp_path, stdlib_data):
    checkpoint, results = tmp_path / "checkpoint", tmp_path / "results"
    train = [sys.executable, str(REPO_ROOT / "train.py"), str(TINY), "--set", "train-iters=4",
             "--set", f"data-path={stdlib_data}", "--set", f"save={checkpoint}", "--set", f"load={checkpoint}"]
    done = subprocess.run(train, cwd=REPO_ROOT, env=child_environment(), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (tmp_path / "my_tasks").mkdir()
    (tmp_path / "my_tasks" / "python_mc.yaml").write_text(TASK_FILE)
    (tmp_path / "my_tasks" / "python_mc.jsonl").write_text(DATA_FILE)
    # README's command, run from the folder holding my_tasks/ (the task's data_files path is relative to it)
    command = COMMAND.replace("python eval.py configs/tiny.yml", f"{sys.executable} {REPO_ROOT / 'eval.py'} {TINY}")
    command = command.replace("load=checkpoints/tiny/kerple_log", f"load={checkpoint}")
    command += f" --set eval-results-dir={results}"
    done = subprocess.run(command, shell=True, cwd=tmp_path, env=child_environment(), capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "|python_mc|" in done.stdout.replace(" ", "") and "acc" in done.stdout
    result_file = next((results / "lm_eval").glob("*.json"))
    written = json.loads(result_file.read_text())
    assert written["evaluation"]["tasks"] == ["python_mc"] and "acc,none" in written["results"]["python_mc"]
    # lm-eval's own output (progress bars, its log, git's complaint outside a repository) is kept beside the
    # result, named on stdout; the terminal gets the table and the paths alone.
    log = result_file.with_suffix(".log")
    assert f"lm-eval's own output (its log, progress bars, warnings): {log}\n" in done.stdout
    assert done.stderr == "" and "it/s]" in log.read_text()
    assert "is defined, but aggregation is not" not in log.read_text()
