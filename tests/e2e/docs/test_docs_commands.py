"""The docs cannot drift: every shell command of README.md and docs/ (each fenced bash block, every page
in reading order) is run as written by this test, or it is listed with the reason it is not run here (a GPU,
the internet, the paper's data, minutes of CPU) and, where another test runs it in a reduced form, that
test's name. A command that fails here fails this test.

The README's `make demo` (at a few steps) runs once, in a copy of the files git tracks; then each page's
commands run in order, in a copy of that folder of the page's own, as a reader who did the quick start
follows the page (one case per page, so a parallel run spreads them).

Each command is handled by the first rule of tests/support/docs_commands.py's RULES its text matches, and a command
no rule matches fails tests/docs/test_docs_commands.py: a new documented command needs a rule (run it, or say why
not). Commands are changed only in their sizes: `--set` values replaced or added (TINY sizes) or a size option
appended (the demo's steps, a corpus's bytes), and a free rendezvous port for deepy.py (the machine is shared).
Commands that read the paper's data (configs/kerple_log.yml) must fail with the message naming
tools/datasets/prepare_data.py. A command already run earlier on its page (a training that
differs only in what was cheapened) is not run twice; a command two pages share runs once, after the demo, in the
folder the pages' copies start from.
"""
import os
import pathlib
import resource
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from tests.support.docs_commands import (DEMO, REPO, Run, all_commands, doc_pages, rule, shared_commands, to_run,
                                         with_sets)
from tests.support.training import free_port


def test_the_cuda_install_is_the_makefiles():
    """`make venv TORCH_CUDA=cu128` installs requirements.txt's torch pin from PyTorch's CUDA index, before the
    requirements, with the pip line the GPU guide shows for an existing virtualenv."""
    pin = next(line for line in (REPO / "requirements/requirements.txt").read_text().splitlines()
               if line.startswith("torch=="))
    shown = next(c for name, c in all_commands() if name == "docs/gpu/README.md" and "--index-url" in c)
    assert shown == f".venv/bin/python -m pip install {pin} --index-url https://download.pytorch.org/whl/cu128"
    planned = subprocess.run(["make", "-n", "-B", "venv", "TORCH_CUDA=cu128"], cwd=REPO, capture_output=True,
                             text=True, check=True).stdout.splitlines()
    cuda = planned.index(shown.replace(" install ", " install --quiet "))
    assert cuda < next(i for i, line in enumerate(planned) if "-r requirements/requirements.txt" in line)
    plain = subprocess.run(["make", "-n", "-B", "venv"], cwd=REPO, capture_output=True, text=True, check=True).stdout
    assert "download.pytorch.org" not in plain


def tracked_files() -> list[str]:
    return list(filter(None, subprocess.run(["git", "ls-files", "-z", "--cached"], cwd=REPO,
                                            capture_output=True, text=True, check=True).stdout.split("\0")))


def run_command(root: pathlib.Path, command: str, action) -> tuple[str, subprocess.CompletedProcess]:
    """Run the command in `root`; also what it took: wall seconds and the CPU seconds of its processes (user +
    sys, which a busy machine disturbs less), printed beside each command to show where the time goes."""
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1", "NEOX_PROGRESS": "0"}
    if "deepy.py" in command:
        command = with_sets(command, {"master_port": free_port()})
    began, cpu = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(["bash", "-c", command], cwd=root, env=env, input=getattr(action, "stdin", None),
                          capture_output=True, text=True, timeout=900)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_seconds = after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime
    return f"{time.time() - began:5.1f} s wall {cpu_seconds:5.1f} s CPU", done


def failure(where: str, action, done: subprocess.CompletedProcess) -> str | None:
    """What is wrong with the command's outcome under its rule, or None."""
    output = done.stdout + done.stderr
    if isinstance(action, Run):
        if done.returncode != 0:
            return f"{where}: exit {done.returncode}:\n{output[-2000:]}"
        if action.output and action.output not in output:
            return f"{where}: its output lacks {action.output!r}:\n{output[-2000:]}"
        return None
    said = [s for s in action.says if s not in done.stderr]
    if done.returncode != 2 or said or "Traceback" in output:
        return (f"{where}: expected a refusal (exit 2, no traceback) saying {list(action.says)}; "
                f"got exit {done.returncode}:\n{output[-2000:]}")
    return None


def check_exports(root: pathlib.Path, commands) -> None:
    """Every Hugging Face export the commands wrote holds its config, its files with the usual permissions."""
    mask = os.umask(0)
    os.umask(mask)
    for command in commands:
        if "convert_to_hf.py" in command:
            export = root / shlex.split(command)[shlex.split(command).index("--output_dir") + 1]
            assert (export / "config.json").is_file(), command
            modes = {p.name: oct(p.stat().st_mode & 0o777) for p in export.iterdir() if p.is_file()}
            assert set(modes.values()) == {oct(0o666 & ~mask)}, f"the export's files have the usual permissions: {modes}"


def build_demo(root: pathlib.Path) -> None:
    """The files git tracks copied to `root` (nothing a documented command wrote in the working tree: data,
    checkpoints, results, exports, a method or mode a reader added; the virtualenv only by a link), then
    the demo run in it, then the commands pages share."""
    for name in tracked_files():
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    (root / ".venv").symlink_to(REPO / ".venv")
    (root / "prompts.txt").write_text("def main():\nclass Config:\n")  # what the input-file example reads
    took, done = run_command(root, DEMO, rule("make demo"))
    print(f"{took}  {DEMO}")
    wrong = failure(f"[README.md] {DEMO}", rule("make demo"), done)
    assert wrong is None, wrong
    assert (root / "eval_results/tiny/ppl_vs_length.png").stat().st_size > 10_000
    shared, failures = shared_commands(), []
    for command, action in shared:
        took, done = run_command(root, command, action)
        print(f"{took}  {command}")
        wrong = failure(f"[shared by two pages] {command}", action, done)
        if wrong:
            failures.append(wrong)
    assert not failures, "\n\n".join(failures)
    check_exports(root, [command for command, _ in shared])


@pytest.fixture(scope="session")
def demo(tmp_path_factory, worker_id) -> pathlib.Path:
    """The copy with the demo done, built once per test run: under pytest-xdist the first worker to need it
    builds it in the run's shared temporary folder while the others wait on a lock, then all reuse it."""
    from filelock import FileLock
    if worker_id == "master":
        root = tmp_path_factory.mktemp("docs") / "repo"
        build_demo(root)
        return root
    shared = tmp_path_factory.getbasetemp().parent / "docs-demo"
    with FileLock(f"{shared}.lock"):
        if not (shared / "built").is_file():
            shutil.rmtree(shared, ignore_errors=True)
            build_demo(shared / "repo")
            (shared / "built").touch()
    return shared / "repo"


# One case per page with commands to run, so a parallel run spreads the pages over its workers (each case a work
# unit of its own: tests/conftest.py's UNIT_PER_CASE; every other test goes with its file).
PAGES = [name for name in doc_pages() if {command for command, _ in to_run(name)} - {DEMO} - {
    command for command, _ in shared_commands()}]


@pytest.mark.parametrize("page", PAGES)
def test_documented_commands_work_as_written(page, demo, tmp_path):
    """The page's commands, in order, as a reader who has done the quick start (`make demo`) runs them:
    each page in a copy of the demo's folder of its own."""
    copy = tmp_path / "repo"
    shutil.copytree(demo, copy, symlinks=True)
    failures, ran, exports = [], [], []
    done_before = {DEMO} | {command for command, _ in shared_commands()}  # the copy holds what they wrote
    for command, action in to_run(page, all_commands(copy)):
        if command in done_before:
            continue
        took, done = run_command(copy, command, action)
        ran.append(f"{took}  {command}")
        wrong = failure(f"[{page}] {command}", action, done)
        if wrong:
            failures.append(wrong)
        else:
            exports.append(command)
    print("\n".join(ran))
    assert not failures, "\n\n".join(failures)
    check_exports(copy, exports)
    tracked = set(tracked_files())
    new = sorted(str(p.relative_to(copy)) for p in copy.rglob("*") if p.is_file() and ".venv" not in p.parts
                 and "__pycache__" not in p.parts and str(p.relative_to(copy)) not in tracked)
    checked = subprocess.run(["git", "check-ignore", "--no-index", "--stdin", "-v", "-n"], cwd=REPO,
                             input="\n".join(new), capture_output=True, text=True).stdout.splitlines()
    not_ignored = [line.split("\t", 1)[1] for line in checked if line.startswith("::")]
    # prompts.txt is this test's own input, written above; everything else a documented command wrote
    assert not not_ignored, f"what documented commands write and git does not ignore (add it to .gitignore): {not_ignored}"
