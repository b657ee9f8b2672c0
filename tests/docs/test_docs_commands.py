"""The documented commands' table (tests/support/docs_commands.py): every shell command of README.md and docs/
has a rule, the commands not run here say why, the GPU guide's multi-GPU command is the two-rank launch test's,
and the README's case runs the demo the other pages start from and exports its model. The commands themselves
run in tests/e2e/docs/test_docs_commands.py."""
import shlex

from tests.support.docs_commands import DEMO, NotRun, all_commands, rule, to_run
from tests.support.training import TWO_RANKS


def test_every_documented_command_has_a_rule():
    commands = all_commands()
    assert any(command == "make demo" for name, command in commands if name == "README.md")
    unknown = [f"{name}: {command}" for name, command in commands if rule(command) is None]
    assert not unknown, f"documented commands this test has no rule for (add one to RULES): {unknown}"


def test_the_multi_gpu_command_is_the_two_rank_launch_test():
    """The GPU guide shows the command the two-rank launch test runs (TWO_RANKS), word for word."""
    shown = [c for name, c in all_commands() if name == "docs/gpu/README.md" and "num_gpus=2" in c]
    assert shown and set(shown) == {"python " + shlex.join(TWO_RANKS)}


def test_the_commands_not_run_here_say_why():
    listed = {command: action.reason for _, command in all_commands()
              if isinstance(action := rule(command), NotRun)}
    assert all(len(reason) > 20 for reason in listed.values()), listed
    print("\n".join(f"not run: {command}\n    {reason}" for command, reason in listed.items()))


def test_the_readme_runs_the_demo_and_exports_its_model():
    """The demo the pages start from is the README's, and the README's case exports the demo's model (it
    checks the export's files)."""
    assert DEMO in [command for command, _ in to_run("README.md")]
    assert any("--output_dir hf/tiny-kerple-log" in command for command, _ in to_run("README.md"))
