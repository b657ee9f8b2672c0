"""The docs cannot drift: every shell command of README.md and docs/ (each fenced bash block, every page
in reading order) is run as written by this test, or it is listed with the reason it is not run here (a GPU,
the internet, the paper's data, minutes of CPU) and, where another test runs it in a reduced form, that
test's name. A command that fails here fails this test.

The README's `make demo` (at a few steps) runs once, in a copy of the files git tracks; then each page's
commands run in order, in a copy of that folder of the page's own, as a reader who did the quick start
follows the page (one case per page, so a parallel run spreads them).

Each command is handled by the first RULE its text matches, and a command no rule matches fails the test:
a new documented command needs a rule (run it, or say why not). Commands are changed only to be cheap:
`--set` values replaced or added (TINY sizes), a free rendezvous port for deepy.py (the machine is
shared). Commands that read the paper's data (configs/kerple_log.yml) must fail with the message naming
tools/datasets/prepare_data.py. A command already run earlier on its page (a training that differs only in
what was cheapened) is not run twice; a command two pages share runs once, after the demo, in the folder the
pages' copies start from.
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
from tests.support.training import TWO_RANKS, free_port

REPO = pathlib.Path(__file__).resolve().parents[2]
# README first (its quick start trains the demo the rest use), then the guides in reading order, then any
# other page of docs/ (sorted). The published reports (docs/reproduction/) and generated tables
# (docs/images/) hold no commands to follow.
READING_ORDER = ("README.md", "docs/training.md", "docs/positional-methods.md", "docs/evaluation.md",
                 "docs/generation-and-export.md", "docs/lm-eval.md", "docs/reproduction.md",
                 "docs/coming-from-neox.md", "docs/performance.md")


def doc_pages(root: pathlib.Path = REPO) -> list[str]:
    pages = sorted(str(p.relative_to(root)) for p in (root / "docs").rglob("*.md")
                   if p.relative_to(root / "docs").parts[0] not in ("reproduction", "images"))
    return [name for name in READING_ORDER if (root / name).is_file()] + \
        [name for name in pages if name not in READING_ORDER]


@dataclasses.dataclass
class Run:
    """Run the command; it must exit 0. `sets`: --set values to replace or add; `args`: words to append."""
    sets: dict = dataclasses.field(default_factory=dict)
    args: tuple = ()
    stdin: str | None = None
    output: str | None = None          # text its output must hold


@dataclasses.dataclass
class Refused:
    """The command needs files this checkout does not have: it must fail (exit 2, one paragraph, no
    traceback) naming them and what creates them."""
    says: tuple


@dataclasses.dataclass
class NotRun:
    reason: str


# The demo's steps, and the same for the docs' training commands on tiny.yml (each into a run-dir of its
# own: tiny.yml names no folder, so none of them resumes or refuses the demo's checkpoints).
TRAIN = {"train-iters": 8, "checkpoint-factor": 8, "eval-interval": 8, "eval-iters": 1, "log-interval": 2}
GENERATE = {"maximum_tokens": 8, "num-samples": 1}
RULER = {"eval-task-limit": 1, "eval-task-metadata": "{max_seq_lengths: [512]}"}
DEMO_TRAIN = " ".join(f"--set {key}={value}" for key, value in TRAIN.items())
PAPER_DATA = Refused(("data/github/github_text_document", "python tools/datasets/prepare_data.py github"))
GPU = NotRun("needs a GPU machine (docs/gpu/README.md); `make gpu-check` runs there")
BENCHMARK = NotRun("a benchmark: minutes on a quiet machine, whose numbers are the table beside it")

RULES = [
    (r"^make demo$", Run(args=("-o", ".venv/.installed", f"PY={sys.executable}", f"DEMO_TRAIN_ARGS={DEMO_TRAIN}",
                               "DEMO_EVAL_ARGS=--set eval-chunks=2"),
                         output="perplexity against evaluation length: eval_results/tiny/ppl_vs_length.png")),
    (r"^make test$", NotRun("the whole test suite, which holds this test")),
    (r"^make help$", Run(output="make demo ")),
    (r"configs/kerple_log\.yml .*--dry-run$", Run(output="python tools/datasets/prepare_data.py github")),
    (r"configs/kerple_log\.yml", PAPER_DATA),
    (r"^python tools/datasets/prepare_data\.py$", Run(output="openwebtext2")),
    (r"^python tools/datasets/prepare_data\.py prose latex --dry-run$", Run(output="texlive-science-doc_2022")),
    (r"^python tools/datasets/prepare_data\.py prose latex", NotRun("downloads npm and Debian packages (needs the "
                                                                    "internet); tests/data/test_public_corpora.py runs it "
                                                                    "against a local server")),
    (r"^python tools/datasets/prepare_data\.py ", NotRun("downloads the paper's corpora (needs the internet); "
                                                        "tests/data/test_prepare_data.py runs it against a local server")),
    (r"^python tools/datasets/preprocess_data\.py --input data/owt2/",
     Refused(("vocab-file data/gpt2-vocab.json does not exist",))),
    (r"^python tools/datasets/(build_default_corpus\.py|download_pile\.py --help)$", Run()),
    (r"^python tools/datasets/build_default_corpus\.py --include-tests --output-dir data/stdlib-tests$", Run()),
    (r"--set pos-emb=learned_slopes", NotRun("needs the guide's example method saved first; "
                                             "tests/e2e/model/positional/test_adding_a_method.py saves it in a copy and trains it")),
    (r"^python tools/docs/config_reference\.py --write$", Run()),  # without the example method: rewrites it as it is
    (r"^python deepy\.py train\.py configs/tiny\.yml --set num_gpus=2 ",
     NotRun("the GPU guide's multi-GPU command: tests/e2e/training/test_training.py::test_deepy_trains_the_tiny_profile[2] runs "
            "it on two CPU ranks, `make gpu-check` on two GPUs")),
    (r"^mkdir -p runs && cat > runs/hostfile <<", Run()),
    (r"-H runs/hostfile --dry-run$", Run(output="--hostfile runs/hostfile")),
    (r"-H runs/hostfile$", NotRun("needs the hostfile's two nodes, reachable by ssh")),
    (r"^make venv TORCH_CUDA=|--index-url https://download\.pytorch\.org/whl/",
     NotRun("downloads torch's CUDA build (needs the internet); test_the_cuda_install_is_the_makefiles "
            "checks the Makefile runs this line")),
    (r"^\.venv/bin/python -m tools\.gpu_check\.wheels --list$", Run(output="deepspeed")),
    (r"^\.venv/bin/python -c .*prepare_data\(load_sweep\('configs/reproduce/gpu-mini\.yml'\)",
     NotRun("tokenizes with GPT-2's BPE, whose files `prepare_data.py gpt2` downloads (needs the internet)")),
    (r"sequence-parallel-size=", NotRun("2 or 4 ranks for minutes on CPU; tests/e2e/model/test_sequence_parallel_training.py "
                                        "runs them reduced (2 ranks x 2 steps resumed both ways and an evaluation; "
                                        "2 replicas x 2 shards x 3 steps, marked slow; against one process)")),
    (r"^python (deepy\.py )?train\.py configs/tiny\.yml", Run(sets=TRAIN)),
    (r"^python evaluate\.py (configs/tiny\.yml )?configs/eval/tiny\.yml", Run(sets={"eval-chunks": 2})),
    (r"^python evaluate\.py --set load=(checkpoints/variants|runs)/", Run(sets={"eval-chunks": 2})),  # a checkpoint alone
    (r"^python evaluate\.py configs/eval/kv_retrieval\.yml",
     Run(sets={"eval-lengths": "[64, 128]", "probe-depths": "[0.0, 1.0]", "probe-samples": 1})),
    (r"^python evaluate\.py configs/tiny\.yml configs/eval/probe\.yml",
     Run(sets={"eval-lengths": "[128, 256]", "probe-depths": "[0.0, 1.0]", "probe-samples": 1})),
    (r"^python -m tools\.analysis\.make_tables eval_results/tiny --train-logs", Run(output="sec/step")),
    (r"^python -m tools\.analysis\.", Run()),
    (r"--set text-gen-type=interactive", Run(sets=GENERATE, stdin="def main():\n")),
    (r"^python (deepy\.py )?generate\.py ", Run(sets=GENERATE)),
    (r"^python tools/ckpts/convert_to_hf\.py ", Run()),
    # RULER at one length (512: the shortest a niah sample fits with byte-level tokens), one sample: both
    # commands score the same way, so the second merges into the first's result file.
    (r"^OMP_NUM_THREADS=1 python eval\.py .*(--eval_tasks niah_single_1|configs/eval/ruler\.yml)", Run(sets=RULER)),
    (r"--eval_tasks lambada_openai", NotRun("lm-eval's hub tasks download their data (needs the internet)")),
    (r"--eval_tasks python_mc", NotRun("needs the guide's two task files saved in my_tasks/; "
                                       "tests/run/test_first_contact_help.py saves them and runs this command")),
    (r"^make reproduce", NotRun("21 trainings and their evaluations: about an hour on 2 cores; "
                                "tests/e2e/reproduce/ runs the sweep at toy sizes")),
    (r"^python -m tools\.reproduce configs/reproduce/paper\.yml$", NotRun("the paper's 162M grid: GPUs and its data")),
    (r"^python -m tools\.reproduce configs/reproduce/\S+ --dry-run$", Run()),
    (r"^python -m tools\.reproduce configs/studies/example\.yml --dry-run$", Run(output="Trainings: 4: 0 done, 4 to do")),
    (r"^python -m tools\.reproduce configs/studies/example\.yml$",
     NotRun("4 trainings of 300 steps and their evaluations: minutes of CPU; "
            "tests/e2e/reproduce/test_study_example.py runs this study through the runner at 4 steps")),
    (r"^python deepy\.py train\.py -d ", NotRun("needs a GPT-NeoX or KERPLE-fork config folder; "
                                               "tests/neox_arguments/test_neox_compat_configs.py runs the fork's configs")),
    (r"tools[./]ckpts[./]import_neox|imported/RUN",
     NotRun("needs a GPT-NeoX checkpoint (the released ones are a download); "
            "tests/checkpoint/test_import_neox_checkpoint.py writes one and imports it")),
    (r"^(OMP_NUM_THREADS=1 )?python benchmarks/", BENCHMARK),
    (r"^OMP_NUM_THREADS=1 /usr/bin/time -v python evaluate\.py .*eval-lengths=\[131072\]",
     Run(sets={"eval-lengths": "[256]"})),   # 131,072 tokens take 77 s and 845 MiB: the same command at 256
    (r"^export TORCHINDUCTOR_CACHE_DIR|^cat > repro\.py|python repro\.py$",
     NotRun("reproduces a torch bug of the compiled CPU flex kernel "
            "(docs/known-issues.md): compiles kernels for minutes")),
    (r"^(OMP_NUM_THREADS=1 )?(make gpu-|\.venv/bin/python -m tools\.gpu_check( --device cpu|\.train_loop --stage|\.train_speed ))",
     NotRun("the GPU check; tests/e2e/tools/test_gpu_check.py runs its CPU smoke form")),
    (r"^(cp \.\./shared|\.venv/bin/python -c|python3 -m pip install)", GPU),
]


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


def doc_commands(text: str) -> list[str]:
    """Every command of the text's fenced bash blocks, in order; continuation lines joined, comments
    dropped, a here-document kept with the command that opens it."""
    commands, block, pending, heredoc = [], None, "", None
    for line in text.splitlines():
        if heredoc is not None:
            pending += line + "\n"
            heredoc = None if line.strip() == heredoc else heredoc
            if heredoc is None:
                commands.append(pending.strip())
                pending = ""
            continue
        if line.startswith("```"):
            block = None if block else (line[3:].strip() or "plain")
        elif block == "bash":
            line = strip_comment(line)
            if line.endswith("\\"):
                pending += line[:-1].strip() + " "
                continue
            opened = re.search(r"<<\s*'?(\w+)'?", line)
            if opened:
                heredoc, pending = opened.group(1), pending + line + "\n"
                continue
            command = " ".join((pending + line.strip()).split())
            pending = ""
            if command:
                commands.append(command)
    return commands


def all_commands(root: pathlib.Path = REPO) -> list[tuple[str, str]]:
    """(file, command) of every documented command, in reading order."""
    return [(name, command) for name in doc_pages(root) for command in doc_commands((root / name).read_text())]


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
    env = []
    while words and re.match(r"^[A-Z_]+=", words[0]):  # VAR=value prefixes stay shell words
        env.append(words.pop(0))
    return " ".join(env + [shlex.join(words)])


def test_every_documented_command_has_a_rule():
    commands = all_commands()
    assert any(command == "make demo" for name, command in commands if name == "README.md")
    unknown = [f"{name}: {command}" for name, command in commands if rule(command) is None]
    assert not unknown, f"documented commands this test has no rule for (add one to RULES): {unknown}"


def test_the_multi_gpu_command_is_the_two_rank_launch_test():
    """The GPU guide shows the command the two-rank launch test runs (TWO_RANKS), word for word."""
    shown = [c for name, c in all_commands() if name == "docs/gpu/README.md" and "num_gpus=2" in c]
    assert shown and set(shown) == {"python " + shlex.join(TWO_RANKS)}


@pytest.mark.launches
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


def test_the_commands_not_run_here_say_why():
    listed = {command: action.reason for _, command in all_commands()
              if isinstance(action := rule(command), NotRun)}
    assert all(len(reason) > 20 for reason in listed.values()), listed
    print("\n".join(f"not run: {command}\n    {reason}" for command, reason in listed.items()))


def tracked_files() -> list[str]:
    return list(filter(None, subprocess.run(["git", "ls-files", "-z", "--cached"], cwd=REPO,
                                            capture_output=True, text=True, check=True).stdout.split("\0")))


def cheapened(command: str, action) -> str:
    """The command as this test runs it: `--set` values and words from its rule (without the port)."""
    if isinstance(action, Run):
        command = with_sets(command, action.sets) if action.sets else command
        command = " ".join([command, *map(shlex.quote, action.args)])
    return command


def to_run(name: str, commands=None) -> list[tuple[str, object]]:
    """(cheapened command, rule) of the page's commands this test runs, in order: each once (a training in a
    guide that differs only in what was cheapened is not run twice)."""
    done_before, runs = set(), []
    for page, command in commands if commands is not None else all_commands():
        action = rule(command)
        if page != name or action is None or isinstance(action, NotRun):  # no rule: the rule test says
            continue
        command = cheapened(command, action)
        if command not in done_before:
            done_before.add(command)
            runs.append((command, action))
    return runs


def run_command(root: pathlib.Path, command: str, action) -> tuple[float, subprocess.CompletedProcess]:
    env = {**os.environ, "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OMP_NUM_THREADS": "1", "NEOX_PROGRESS": "0"}
    if "deepy.py" in command:
        command = with_sets(command, {"master_port": free_port()})
    began = time.time()
    done = subprocess.run(["bash", "-c", command], cwd=root, env=env, input=getattr(action, "stdin", None),
                          capture_output=True, text=True, timeout=900)
    return time.time() - began, done


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


# The quick start every other page follows: README's `make demo` (cheapened by its rule), run once per test
# run in a copy the pages' cases start from.
DEMO = cheapened("make demo", rule("make demo"))


def shared_commands() -> list[tuple[str, object]]:
    """(cheapened command, rule) of the commands two or more pages run (a training, an export, an evaluation
    the guides repeat), in reading order: run once, in the folder every page's copy starts from."""
    commands, pages_of = all_commands(), {}
    for name in doc_pages():
        for command, action in to_run(name, commands):
            pages_of.setdefault(command, (action, set()))[1].add(name)
    return [(command, action) for command, (action, pages) in pages_of.items() if len(pages) > 1 and command != DEMO]


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
    seconds, done = run_command(root, DEMO, rule("make demo"))
    print(f"{seconds:5.1f} s  {DEMO}")
    wrong = failure(f"[README.md] {DEMO}", rule("make demo"), done)
    assert wrong is None, wrong
    assert (root / "eval_results/tiny/ppl_vs_length.png").stat().st_size > 10_000
    shared, failures = shared_commands(), []
    for command, action in shared:
        seconds, done = run_command(root, command, action)
        print(f"{seconds:5.1f} s  {command}")
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


# One case per page with commands to run, so a parallel run spreads the pages over its workers (each
# case its own xdist group; tests/conftest.py groups every other test by its file).
PAGES = [name for name in doc_pages() if {command for command, _ in to_run(name)} - {DEMO} - {
    command for command, _ in shared_commands()}]


@pytest.mark.launches
@pytest.mark.parametrize("page", [pytest.param(name, marks=pytest.mark.xdist_group(f"docs:{name}"))
                                  for name in PAGES])
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
        seconds, done = run_command(copy, command, action)
        ran.append(f"{seconds:5.1f} s  {command}")
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


def test_the_readme_runs_the_demo_and_exports_its_model():
    """The demo the pages start from is the README's, and the README's case exports the demo's model (it
    checks the export's files)."""
    assert DEMO in [command for command, _ in to_run("README.md")]
    assert any("--output_dir hf/tiny-kerple-log" in command for command, _ in to_run("README.md"))
