"""The documented commands and what the docs tests do with each: every shell command of README.md and docs/
(each fenced bash block, every page in reading order) and the RULES that say how it is run (its `--set` values
made cheap), refused (the paper's data) or not run here, and why. tests/docs/test_docs_commands.py checks the
table; tests/e2e/docs/test_docs_commands.py runs the commands."""
import dataclasses
import pathlib
import re
import shlex
import sys

from megatron.neox_arguments.yaml_loader import normalise_key

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
    # the second corpus of the data-mix example at 2 MB of source, not all ~30 MB of the library and its tests: the
    # mix needs only a few batches of it (3.7 s of CPU to build it whole, 1.8 s at 2 MB)
    (r"^python tools/datasets/build_default_corpus\.py --include-tests --output-dir data/stdlib-tests$",
     Run(args=("--max-bytes", "2000000"))),
    (r"--set pos-emb=learned_slopes", NotRun("needs the guide's example method saved first; "
                                             "tests/e2e/model/positional/test_adding_a_method.py saves it in a copy and trains it")),
    (r"^python tools/docs/config_reference\.py --write$", Run()),  # without the example method: rewrites it as it is
    (r"^python deepy\.py train\.py configs/tiny\.yml --set num_gpus=2 ",
     NotRun("the GPU guide's multi-GPU command: "
            "tests/e2e/training/test_training.py::test_deepy_trains_the_tiny_profile[2] runs it on two CPU ranks, "
            "`make gpu-check` on two GPUs")),
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
                                        "runs them reduced (2 replicas x 2 shards, 2 steps resumed both ways, and a "
                                        "2-rank evaluation; against one process)")),
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
            "tests/e2e/reproduce/test_study_example.py runs this study through the runner at 4 steps, "
            "its first seed")),
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
