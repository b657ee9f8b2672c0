"""What the entry points' --help tests and README's local lm-eval task example share (tests/run/, in-process;
tests/e2e/run/, which runs the scripts): the entry points, a script's docstring read without running it, and
the task example's files and command, which docs/lm-eval.md holds word for word."""
import importlib.util

from tests.support.training import REPO_ROOT

SCRIPTS = ("train.py", "evaluate.py", "generate.py", "eval.py")


def docstring(script: str) -> str:
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py") + "_for_help", REPO_ROOT / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the entry points import their stacks inside main() only
    return module.__doc__


# --------------------------------------------------- docs/lm-eval.md's local lm-eval task example
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
