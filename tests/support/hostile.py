"""The bad-input tests' shared checks: an entry point's one-paragraph error (exit 2, one `error:` line, no
traceback), train.py and evaluate.py as processes, folders no one can write to or with no room left, a vocabulary
that cannot encode a corpus, a fork checkpoint's sizes, and generate.py's config with no checkpoint to load."""
import importlib
import json
import os
import pathlib
import subprocess
import sys

import pytest

from megatron.neox_arguments import NeoXArgs
from tests.support.neox_fork import config as fork_config
from tests.support.training import REPO_ROOT, TINY, child_environment, set_flags, tiny_overrides


def assert_clear_error(result, *fragments, alone=False):
    """Exit 2, the message on stderr as one `error:` line, and no traceback; `alone`: and nothing else on stderr
    but DeepSpeed's accelerator warning."""
    assert result.returncode == 2, result.stdout[-2000:] + result.stderr[-3000:]
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    message = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(message) == 1, result.stderr[-3000:]
    if alone:
        said = [line for line in result.stderr.splitlines() if line.strip() and "[WARNING]" not in line]
        assert said == message, result.stderr[-3000:]
    for fragment in fragments:
        assert fragment in message[0], message[0]
    return message[0]


def entry_point_in_process(monkeypatch, capsys, *argv) -> subprocess.CompletedProcess:
    """`python *argv` run in this process: the script's own `main` under run_cli (which prints a config refusal as
    one paragraph and exits 2), with sys.argv and __main__ (whose file name picks the script's flags) as that
    process has them. For what the config package decides before anything is launched (a refusal, deepy.py's
    --dry-run); one launch of each entry point shows the paragraph reaching a terminal. As a CompletedProcess,
    for assert_clear_error."""
    from megatron.neox_arguments import run_cli
    monkeypatch.setenv("DS_ACCELERATOR", "cpu")  # run_cli would otherwise set it in this process for good
    monkeypatch.delenv("RANK", raising=False)  # rank 0 prints the paragraph
    script = pathlib.Path(argv[0])
    module = importlib.import_module(".".join(script.with_suffix("").parts))  # train, evaluate, deepy, tools.x.y
    monkeypatch.setattr(sys, "argv", [str(REPO_ROOT / script), *map(str, argv[1:])])
    monkeypatch.setitem(sys.modules, "__main__", module)
    with capsys.disabled():
        # DeepSpeed's logger keeps the sys.stdout of its import: this test's capture, closed after it, would make
        # every later DeepSpeed log line in this worker a "--- Logging error ---" traceback.
        import deepspeed  # noqa: F401
    capsys.readouterr()  # only what this run prints
    import torch
    threads = torch.get_num_threads()  # train.py and evaluate.py choose their own (megatron/run/cpu_threads.py)
    try:
        code = run_cli(module.main)
    except SystemExit as stopped:
        code = stopped.code
    finally:
        torch.set_num_threads(threads)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(argv, code or 0, out, err)  # None: the process's exit status 0


def train_in_process(monkeypatch, capsys, data, folder, **overrides) -> subprocess.CompletedProcess:
    """train() run by train.py's own main in this process (entry_point_in_process): for what it refuses at start-up
    (the config, the start-up checks, the data) before anything is trained."""
    values = tiny_overrides(data, folder, **{"train_iters": 2, **overrides})
    return entry_point_in_process(monkeypatch, capsys, "train.py", TINY, *set_flags(values))


def evaluate_in_process(monkeypatch, capsys, *configs, **overrides) -> subprocess.CompletedProcess:
    """evaluate() run by evaluate.py's own main in this process (entry_point_in_process): for what it refuses
    before the first length is scored (the config, the checkpoint, the result file)."""
    values = {"eval_lengths": "[64]", "eval_chunks": 4, **overrides}
    return entry_point_in_process(monkeypatch, capsys, "evaluate.py", *configs, *set_flags(values))


def script(*argv, umask=None):
    return subprocess.run([sys.executable, *argv], cwd=REPO_ROOT, env=child_environment(), capture_output=True,
                          text=True, timeout=300, preexec_fn=(lambda: os.umask(umask)) if umask is not None else None)


def train(data, folder, **overrides):
    return script("train.py", str(TINY), *set_flags(tiny_overrides(data, folder, **{"train_iters": 2, **overrides})))


def evaluate(*configs, umask=None, **overrides):
    values = {"eval_lengths": "[64]", "eval_chunks": 4, **overrides}
    return script("evaluate.py", *map(str, configs), *set_flags(values), umask=umask)


@pytest.fixture
def unwritable_folder(tmp_path):
    """A folder this process cannot create files in. For a normal user, mode 555. Root ignores mode
    bits (test_hostile_config.py shows the check accepts such a folder for root, rightly), so for root
    an immutable folder (chattr +i), which refuses even root, as a read-only mount would."""
    folder = tmp_path / "locked"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    made = subprocess.run(["chattr", "+i", str(folder)], capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"running as root, and no folder root cannot write to could be made here (chattr +i: "
                    f"{made.stderr.strip() or made.returncode})")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], check=True)


@pytest.fixture
def full_disk(tmp_path):
    """A 3 MB tmpfs: one checkpoint of the tiny profile fits (1.8 MB), a second does not."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("a real full disk needs a tmpfs mount, which needs root")
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=3m", "tmpfs", str(mount)], capture_output=True,
                          text=True)
    if made.returncode:
        pytest.skip(f"mounting a small tmpfs is not permitted here: {made.stderr.strip() or made.returncode}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


@pytest.fixture
def long_config(tmp_path):
    """A config file whose one value is 2 MB of incompressible text: (its path, the value)."""
    import base64
    value = base64.b64encode(os.urandom(1_500_000)).decode()
    path = tmp_path / "long.yml"
    path.write_text(f'{{"wandb_group": "{value}"}}\n')
    return path, value


# A corpus, and a GPT-2 vocabulary that cannot encode it: preprocessing's refusal, in-process and through the tool.
TEXT = "def decode(data):\n    return data.decode('utf-8')  # héllo ✓\n" * 20


@pytest.fixture
def gpt2_without_bytes(tmp_path):
    """A GPT-2 vocab.json with `<|endoftext|>` but the symbols of two bytes only ('d', 'e')."""
    vocab, merges = tmp_path / "vocab.json", tmp_path / "merges.txt"
    vocab.write_text(json.dumps({"d": 0, "e": 1, "<|endoftext|>": 2}))
    merges.write_text("#version: 0.2\n")
    return str(vocab), str(merges)


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"text": TEXT}) + "\n" for _ in range(5)))
    return str(path)


# A learning rate that blows the tiny model's weights up in one step; the checkpoints a run left in <folder>/ckpt.
BLOWN_UP_LR = {"optimizer.params.lr": 1e30, "warmup": 0.0, "lr_decay_style": "constant"}


def saved(folder) -> list[str]:
    ckpt = folder / "ckpt"
    return sorted(p.name for p in ckpt.iterdir()) if ckpt.is_dir() else []


FORK = fork_config("kerple_log")  # a 2-layer fork checkpoint's sizes (tests/support/neox_fork.py)
GENERATION = REPO_ROOT / "configs" / "text_generation.yml"


def generation_args(tmp_path, **generation):
    """The tiny profile with generate.py's keys and a `load` that does not exist: a check that raises
    its own error rather than the checkpoint's ran before the model was loaded."""
    overrides = tiny_overrides("unused-data", tmp_path, load=str(tmp_path / "no-checkpoint"))
    return NeoXArgs.from_ymls([TINY, GENERATION], {**overrides, **generation})
