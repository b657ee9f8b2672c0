"""README's quick path, run as written (issue 23): every command of the fenced bash blocks of Quick start,
Training, Evaluating at longer lengths, Generating text and Exporting to Hugging Face, in README order, in
a copy of the working tree, after `make demo` at a few steps. A command that fails there fails this test,
so README cannot drift from the code.

Each command is handled by the first RULE its text matches, and a command no rule matches fails the test:
a new README command needs a rule (run it, or say why not). Commands are changed only to be cheap: `--set`
values replaced or added (TINY sizes), a free rendezvous port for deepy.py (the machine is shared). Commands
that read the paper's data (configs/kerple_log.yml) must fail within seconds with the message naming
tools/datasets/prepare_data.py. PENDING lists the README lines this test expects to change (the test runs
the new text); once README has the new text, the entry must go.
"""
import dataclasses
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from megatron.neox_arguments.yaml_loader import normalise_key
from test_training_support import free_port

REPO = pathlib.Path(__file__).resolve().parents[1]
SECTIONS = ("Quick start", "Training", "Evaluating at longer lengths", "Generating text", "Exporting to Hugging Face")
FAST = 30  # seconds within which a command that cannot run here must have said why (a launch on a busy machine)


@dataclasses.dataclass
class Run:
    """Run the command; it must exit 0. `sets`: --set values to replace or add; `args`: words to append."""
    sets: dict = dataclasses.field(default_factory=dict)
    args: tuple = ()
    stdin: str | None = None
    output: str | None = None          # text its output must hold


@dataclasses.dataclass
class Refused:
    """The command needs files this checkout does not have: it must fail fast (exit 2, one paragraph, no
    traceback) naming them and what creates them."""
    says: tuple


@dataclasses.dataclass
class NotRun:
    reason: str


# The demo's steps, and the same for README's training commands on tiny.yml: `python train.py
# configs/tiny.yml` after `make demo` resumes its checkpoint at its last step, so trains nothing (600 = 600),
# and the demo's evaluation stays the only result file of that run (make_tables refuses two).
TRAIN = {"train-iters": 8, "checkpoint-factor": 8, "eval-interval": 8, "eval-iters": 1, "log-interval": 2}
GENERATE = {"maximum_tokens": 8, "num-samples": 1}
DEMO_TRAIN = " ".join(f"--set {key}={value}" for key, value in TRAIN.items())
PAPER_DATA = Refused(("data/github/github_text_document", "python tools/datasets/prepare_data.py github"))

RULES = [
    (r"^make demo$", Run(args=("-o", ".venv/.installed", f"PY={sys.executable}", f"DEMO_TRAIN_ARGS={DEMO_TRAIN}",
                               "DEMO_EVAL_ARGS=--set eval-chunks=2"),
                         output="perplexity against evaluation length: eval_results/tiny/ppl_vs_length.png")),
    (r"^make test$", NotRun("the whole test suite")),
    (r"configs/kerple_log\.yml .*--dry-run$", Run(output="python tools/datasets/prepare_data.py github")),
    (r"configs/kerple_log\.yml", PAPER_DATA),
    (r"^python tools/datasets/prepare_data\.py$", Run(output="openwebtext2")),
    (r"^python tools/datasets/prepare_data\.py ", NotRun("downloads the paper's corpora (no network here)")),
    (r"^python tools/datasets/preprocess_data\.py --input data/owt2/",
     Refused(("vocab-file data/gpt2-vocab.json does not exist",))),
    (r"^python tools/datasets/(build_default_corpus\.py|download_pile\.py --help)$", Run()),
    (r"^python (deepy\.py )?train\.py configs/tiny\.yml", Run(sets=TRAIN)),
    (r"^python evaluate\.py (configs/tiny\.yml )?configs/eval/tiny\.yml", Run(sets={"eval-chunks": 2})),
    (r"^python evaluate\.py configs/tiny\.yml configs/eval/probe\.yml",
     Run(sets={"eval-lengths": "[128, 256]", "probe-depths": "[0.0, 1.0]", "probe-samples": 1})),
    (r"^python -m tools\.analysis\.make_tables eval_results/tiny --train-logs", Run(output="sec/step")),
    (r"^python -m tools\.analysis\.", Run()),
    (r"--set text-gen-type=interactive", Run(sets=GENERATE, stdin="def main():\n")),
    (r"^python (deepy\.py )?generate\.py ", Run(sets=GENERATE)),
    (r"^python tools/ckpts/convert_to_hf\.py ", Run()),
]

# README lines this test expects to change (issue 23), old -> new; the test runs the new text. After
# `make demo`, tiny.yml's checkpoint folder is checkpoints/tiny/kerple_log, so another method needs its own
# save/load; the demo trains 600 steps and writes TensorBoard logs per method.
PENDING = {}


def strip_comment(line: str) -> str:
    """The line without its shell comment (a # outside quotes, at the start or after a blank)."""
    quote = None
    for i, char in enumerate(line):
        if quote:
            quote = None if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].rstrip()
    return line.rstrip()


def readme_commands(text: str) -> list[tuple[str, str]]:
    """(section, command) of every fenced bash block of SECTIONS (with their ### subsections), in order;
    continuation lines joined, comments dropped."""
    commands, section, block, pending = [], None, None, ""
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("```"):
            block = None if block else (line[3:].strip() or "plain")
        elif block == "bash" and section in SECTIONS:
            line = strip_comment(line)
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            command = " ".join((pending + line.strip()).split())
            pending = ""
            if command:
                commands.append((section, command))
    return commands


def rule(command: str):
    for pattern, action in RULES:
        if re.search(pattern, command):
            return action
    return None


def with_sets(command: str, sets: dict) -> str:
    """The command with each `--set KEY=...` of `sets` replaced (same key, '-' or '_') or added at the end."""
    words = shlex.split(command)
    for key, value in sets.items():
        for i in range(len(words) - 1):
            if words[i] == "--set" and normalise_key(words[i + 1].split("=", 1)[0]) == normalise_key(key):
                words[i + 1] = f"{key}={value}"
                break
        else:
            words += ["--set", f"{key}={value}"]
    return shlex.join(words)


def test_every_readme_command_has_a_rule():
    commands = readme_commands((REPO / "README.md").read_text())
    assert {section for section, _ in commands} == set(SECTIONS), "a section lost its commands or its heading"
    unknown = [c for _, c in commands if rule(PENDING.get(c, c)) is None]
    assert not unknown, f"README commands this test has no rule for (add one to RULES): {unknown}"


def test_pending_readme_changes_are_still_pending():
    readme = [c for _, c in readme_commands((REPO / "README.md").read_text())]
    done = [old for old, new in PENDING.items() if old not in readme and new in readme]
    assert not done, f"README has these changes now; remove them from PENDING: {done}"
    lost = [old for old, new in PENDING.items() if old not in readme and new not in readme]
    assert not lost, f"PENDING entries whose old and new text are both missing from README: {lost}"


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> pathlib.Path:
    """The files git tracks, in a temporary folder: nothing a documented command wrote in the working tree
    (data, checkpoints, results, exports, a method or mode a reader added), and the virtualenv only by a link."""
    root = tmp_path_factory.mktemp("readme") / "repo"
    listed = subprocess.run(["git", "ls-files", "-z", "--cached"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout.split("\0")
    for name in filter(None, listed):
        source = REPO / name
        if source.is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    (root / ".venv").symlink_to(REPO / ".venv")
    return root


@pytest.mark.launches
def test_readme_quick_path_commands_work_as_written(copy):
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1", "NEOX_PROGRESS": "0"}
    (copy / "prompts.txt").write_text("def main():\nclass Config:\n")  # what the input-file example reads
    failures, ran, demo_done = [], [], False
    for section, written in readme_commands((copy / "README.md").read_text()):
        command = PENDING.get(written, written)
        action = rule(command)
        if isinstance(action, NotRun) or (command == "make demo" and demo_done):
            continue
        if isinstance(action, Run):
            command = with_sets(command, action.sets) if action.sets else command
            command = " ".join([command, *map(shlex.quote, action.args)])
        if "deepy.py" in command:
            command = with_sets(command, {"master_port": free_port()})
        began = time.time()
        done = subprocess.run(["bash", "-c", command], cwd=copy, env=env, input=getattr(action, "stdin", None),
                              capture_output=True, text=True, timeout=600)
        seconds, output = time.time() - began, done.stdout + done.stderr
        ran.append(f"{seconds:5.1f} s  {command}")
        where = f"[{section}] {command}"
        if isinstance(action, Run):
            demo_done |= command.startswith("make demo")
            if done.returncode != 0:
                failures.append(f"{where}: exit {done.returncode}:\n{output[-2000:]}")
            elif action.output and action.output not in output:
                failures.append(f"{where}: its output lacks {action.output!r}:\n{output[-2000:]}")
        else:
            said = [s for s in action.says if s not in done.stderr]
            if done.returncode != 2 or said or "Traceback" in output or seconds > FAST:
                failures.append(f"{where}: expected a refusal within {FAST} s (exit 2, no traceback) saying "
                                f"{list(action.says)}; got exit {done.returncode} after {seconds:.0f} s:\n"
                                f"{output[-2000:]}")
    print("\n".join(ran))
    assert not failures, "\n\n".join(failures)
    assert (copy / "eval_results/tiny/ppl_vs_length.png").stat().st_size > 10_000
    assert (copy / "hf/tiny-kerple-log/config.json").is_file()
