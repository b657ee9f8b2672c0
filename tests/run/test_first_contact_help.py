"""First contact: each entry point's --help says what it does, gives an example command and lists its main keys
with the defaults of the typed config groups; eval.py's lists --eval_tasks; docs/lm-eval.md holds the local lm-eval
task example as tested. The scripts' --help run as processes, and the example run against a freshly trained tiny
checkpoint: tests/e2e/run/test_first_contact_help.py."""
import dataclasses
import json
import sys

import pytest

from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.neox_arguments.entry_points import ENTRY_POINTS, argument_parser, field_default
from tests.support.first_contact import COMMAND, DATA_FILE, SCRIPTS, TASK_FILE, docstring
from tests.support.training import REPO_ROOT, TINY


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


def test_readme_holds_the_local_task_example_as_tested_here():
    guide = (REPO_ROOT / "docs" / "lm-eval.md").read_text()
    for text in (TASK_FILE, DATA_FILE, COMMAND):
        assert text in guide, f"docs/lm-eval.md lacks:\n{text}"
