"""A positional method is one file: docs/positional-methods.md's example, saved into a copy of the project with nothing
else changed, is accepted by `deepy.py --dry-run`, listed in the config reference, trained by
`train.py`, covered by the registry-parametrised tests, and its initialisation-only option is ignored
when a checkpoint is loaded. Everything runs in subprocesses of the copy, as a user would run it."""
import os
import re
import shutil
import subprocess
import sys

import pytest

from tests.support.training import REPO_ROOT, child_environment, set_flags, tiny_overrides


GUIDE, SECTION = "docs/positional-methods.md", "## Adding a method"


def readme_example() -> str:
    """The first ```python block of the guide's "Adding a method" section."""
    section = (REPO_ROOT / GUIDE).read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


EXAMPLE = readme_example()
METHOD = re.search(r'@register\("(\w+)"', EXAMPLE).group(1)
OPTION, DEFAULT = re.search(r"(\w+): float = option\(([\d.]+)", EXAMPLE).groups()


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A copy of the project (the files git tracks in its code, configs, tests, docs and entry points)
    plus the example as a new file."""
    copy = tmp_path_factory.mktemp("project")
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "megatron", "tools", "configs", "tests", "docs",
                             "deepy.py", "train.py", "evaluate.py", "README.md", "pyproject.toml"], cwd=REPO_ROOT,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        if (REPO_ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(REPO_ROOT / name, copy / name)
    (copy / "megatron" / "model" / "positional_embeddings" / f"{METHOD}.py").write_text(EXAMPLE)
    return copy


def run(project, *argv, timeout=600):
    env = {**child_environment(), "NEOX_SHARED_DIR": str(REPO_ROOT.parent / "shared")}
    result = subprocess.run([sys.executable, *argv], cwd=project, env=env, capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result.stdout


def test_the_example_adds_a_method_and_nothing_else(project):
    tracked = subprocess.run(["git", "ls-files", "megatron"], cwd=REPO_ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    tracked = [name for name in tracked if (REPO_ROOT / name).is_file()]
    copied = sorted(str(p.relative_to(project)) for p in (project / "megatron").rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts)
    example = f"megatron/model/positional_embeddings/{METHOD}.py"
    assert example not in tracked
    assert copied == sorted(tracked + [example])
    assert all((project / name).read_bytes() == (REPO_ROOT / name).read_bytes() for name in tracked)


def test_dry_run_accepts_the_method_and_its_option(project):
    out = run(project, "deepy.py", "train.py", "configs/tiny.yml", "--set", f"pos-emb={METHOD}",
              "--set", f"{OPTION.replace('_', '-')}=0.25", "--dry-run")
    assert re.search(rf"^pos_emb +\"{METHOD}\" +# command line$", out, re.M)
    assert re.search(rf"^{OPTION} +0.25 +# command line$", out, re.M)
    bad = subprocess.run([sys.executable, "deepy.py", "train.py", "configs/tiny.yml", "--set", f"pos-emb={METHOD}",
                          "--set", f"{OPTION}=-1", "--dry-run"], cwd=project, env=child_environment(),
                         capture_output=True, text=True)
    assert bad.returncode == 2 and f"command line: {OPTION.replace('_', '-')}: must be" in bad.stderr


def test_config_reference_lists_the_method_and_its_option(project):
    reference = run(project, "tools/docs/config_reference.py")
    assert re.search(rf"^\| `pos-emb` \| .*\b{METHOD}\b", reference, re.M)
    assert re.search(rf"^\| `{OPTION.replace('_', '-')}` \| `{DEFAULT}` \| .*Initialisation only", reference, re.M)


def test_registry_parametrised_tests_cover_the_method(project):
    out = run(project, "-m", "pytest", "-v", "-p", "no:cacheprovider", "tests/model/positional/test_positional_embeddings.py",
              "tests/model/test_model.py", "tests/checkpoint/test_hf_export.py", "tests/model/attention/test_strategies.py", "-k", METHOD)
    assert " failed" not in out and " error" not in out, out[-3000:]
    # The registry-parametrised tests include the method: its config, the model's paths agreeing with
    # gradients, 16x the training length, and the Hugging Face export (its logits at 1x, 4x and 8x, its
    # greedy generation with its own cache, left-padded rows).
    for test in ("test_positional_embeddings.py::test_build_from_config",
                 "test_model.py::test_sdpa_and_blocked_models_agree_with_gradients",
                 "test_model.py::test_relative_methods_run_at_16x_the_training_length",
                 "test_hf_export.py::test_the_export_gives_this_projects_logits_generations_and_padded_rows"):
        assert re.search(rf"{re.escape(test)}\[{METHOD}\] PASSED", out), test
    # Every attention strategy that can run it, against the reference (forward and gradients).
    assert re.search(rf"test_strategy_matches_the_reference\[blocked-{METHOD}-sequence-gradients\] PASSED", out)
    assert re.search(rf"test_the_cached_step_matches_the_reference\[{METHOD}-None\] PASSED", out)


def test_trains_and_resumes_with_another_initialisation_only_value(project, stdlib_data, tmp_path):
    def train(iters, **overrides):
        values = tiny_overrides(stdlib_data, tmp_path, train_iters=iters, log_interval=1, pos_emb=METHOD,
                                **overrides)
        return run(project, "train.py", "configs/tiny.yml", *set_flags(values))

    first = train(2)
    assert f"pos-emb {METHOD}" in first and re.search(r"step +2/", first), first
    # The checkpoint was trained with the default; loading it with another initial value is allowed
    # (it only decided where training started), so the run goes on from step 2.
    second = train(3, **{OPTION: 0.25})
    assert re.search(r"step +3/", second) and not re.search(r"step +1/", second), second
    assert os.path.isdir(tmp_path / "ckpt" / "global_step3")

    # The checkpoint exports with the file itself (that the export gives the project's logits is the
    # registry-parametrised export test's, which runs the method above).
    run(project, "tools/ckpts/convert_to_hf.py", "--input_dir", str(tmp_path / "ckpt"), "--output_dir",
        str(tmp_path / "hf"))
    assert (tmp_path / "hf" / f"{METHOD}.py").read_text() == EXAMPLE
