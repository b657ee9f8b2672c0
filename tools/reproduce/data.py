"""The sweep's corpora: built (the CPython library corpus) or tokenized (a raw corpus) when missing;
a corpus that is not on this machine is skipped with a message, or replaced by its stand-in."""
import pathlib
import shlex
import subprocess
import sys

from . import REPO_ROOT
from .spec import Dataset, Sweep, SweepError


def prepare_data(sweep: Sweep, names: list[str]) -> list[Dataset]:
    """The datasets to run, built when missing; absent ones are skipped (or replaced by their stand-in)."""
    chosen = []
    for name in names:
        dataset = sweep.data[name]
        if not dataset.ready():
            if dataset.builder == "stdlib":
                build_stdlib(dataset)
            elif dataset.source and pathlib.Path(dataset.source).exists():
                preprocess(dataset)
            else:
                missing = dataset.source or f"{dataset.prefix}.bin/.idx"
                if dataset.stand_in:
                    print(f"dataset {name}: {missing} is not here; using its stand-in {dataset.stand_in}")
                    chosen += [d for d in prepare_data(sweep, [dataset.stand_in]) if d not in chosen]
                else:
                    print(f"dataset {name}: skipped: {missing} is not here (the shared corpora exist only in "
                          "the team's checkout; Pile subsets must be tokenized into that prefix with "
                          "tools/datasets/preprocess_data.py)")
                continue
        if dataset not in chosen:
            chosen.append(dataset)
    return chosen


def _tokenizer_flags(dataset: Dataset) -> list[str]:
    return [arg for key, value in dataset.tokenizer.items() for arg in (f"--{key.replace('_', '-')}", str(value))]


def build_stdlib(dataset: Dataset) -> None:
    prefix = pathlib.Path(dataset.prefix)
    print(f"dataset {dataset.name}: building the CPython standard-library corpus into {prefix}", flush=True)
    _run_tool(["tools/datasets/build_default_corpus.py", "--output-dir", str(prefix.parent),
               "--name", dataset.name, "--no-progress", *_tokenizer_flags(dataset)])


def preprocess(dataset: Dataset) -> None:
    print(f"dataset {dataset.name}: tokenizing {dataset.source} into {dataset.prefix}", flush=True)
    _run_tool(["tools/datasets/preprocess_data.py", "--input", dataset.source, "--output-prefix",
               dataset.prefix.removesuffix("_text_document"), "--append-eod", "--no-progress",
               *_tokenizer_flags(dataset)])


def _run_tool(argv: list[str]) -> None:
    code = subprocess.run([sys.executable, *argv], cwd=REPO_ROOT).returncode
    if code != 0:
        raise SweepError(f"data preparation failed ({shlex.join(argv)} exited with code {code}); see its "
                         "message above")
