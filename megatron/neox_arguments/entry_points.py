"""What `--help` of each entry point says beyond the common arguments: its description and example
are the script's own docstring, its main keys are listed here, and each key's default and meaning
are read from its field in groups.py (so the help never restates a default).

`ENTRY_POINTS[script]` is keyed by the file name of the script that runs (`train.py`, ...); a script
not listed (a test's rank program, a tool) gets the common help only."""
import argparse
import dataclasses
import importlib.util
import json
import os
import shutil
import textwrap
from dataclasses import dataclass

import torch

from .groups import GROUPS


@dataclass(frozen=True)
class Flag:
    """A command-line flag of an entry point's own that sets one config key (upstream NeoX's spelling)."""
    flag: str    # e.g. --eval_tasks
    key: str     # the config key it sets, e.g. eval_tasks
    metavar: str
    help: str
    switch: bool = False  # takes no value: given means true


@dataclass(frozen=True)
class EntryPoint:
    keys: tuple[str, ...]         # its main config keys, most important first
    flags: tuple[Flag, ...] = ()  # its own flags


ENTRY_POINTS = {
    "train.py": EntryPoint(keys=(
        "pos-emb", "seq-length", "train-iters", "train-micro-batch-size-per-gpu", "data-path", "save", "load",
        "checkpoint-factor", "eval-interval", "log-interval", "seed", "progress")),
    "evaluate.py": EntryPoint(keys=(
        "load", "iteration", "eval-lengths", "eval-modes", "eval-chunks", "eval-split", "eval-stride",
        "eval-micro-batch-size", "eval-results-dir", "attention-window", "probe-depths", "probe-samples"),
        flags=(Flag("--force", "eval_force", "", "score again what the result file already holds for this checkpoint "
                    "and these settings (the same as --set eval-force=true)", switch=True),)),
    "generate.py": EntryPoint(keys=(
        "load", "text-gen-type", "sample-input-file", "sample-output-file", "num-samples", "maximum-tokens",
        "temperature", "top-k", "top-p", "recompute", "generation-batch-size"),
        flags=(Flag("--force", "sample_output_force", "", "replace an existing sample-output-file (the same as "
                    "--set sample-output-force=true)", switch=True),)),
    "eval.py": EntryPoint(
        keys=("load", "eval-tasks", "eval-task-paths", "eval-task-length", "eval-task-limit",
              "eval-task-num-fewshot", "eval-stride", "eval-results-dir"),
        flags=(Flag("--eval_tasks", "eval_tasks", "TASK", "the lm-eval tasks to run, e.g. --eval_tasks lambada_openai "
                    "hellaswag (upstream NeoX's flag; the same as --set 'eval-tasks=[lambada_openai, hellaswag]')"),)),
}

_FIELDS = {f.name: f for group in GROUPS for f in dataclasses.fields(group)}


def field_default(f: dataclasses.Field):
    """The default a key has when no config sets it (before derivation: null may mean "derived")."""
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def main_keys_text(keys, width: int | None = None) -> str:
    """The epilog of an entry point's --help: each key, its default and its meaning, from groups.py."""
    width = width or min(shutil.get_terminal_size().columns, 100)
    lines = textwrap.wrap("main config keys (set them in a YAML file or with --set KEY=VALUE; docs/config-reference.md "
                          "lists every key):", width=width)
    for key in keys:
        f = _FIELDS[key.replace("-", "_")]
        default = field_default(f)
        shown = "none" if default is None else json.dumps(default)
        lines.append(f"  {key} (default {shown})")
        lines += textwrap.wrap(f.metadata["help"], width=width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)


def argument_parser(script: str, doc: str | None) -> argparse.ArgumentParser:
    """The command line of entry point `script` (its file name), `doc` its docstring: the common
    arguments, then its own flags; its --help ends with its main keys."""
    entry = ENTRY_POINTS.get(script)
    parser = argparse.ArgumentParser(
        description=doc if entry and doc else "Run with a NeoX config (YAML files or deepy.py).",
        epilog=main_keys_text(entry.keys) if entry else None, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("configs", nargs="*", help="YAML config files, merged in order (a later file wins)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="override one config key, beating every file (repeatable), e.g. --set train-iters=10")
    parser.add_argument("--megatron_config", help="base64 JSON config sent by deepy.py (not typed by hand)")
    parser.add_argument("--megatron_config_file",
                        help="a file holding what deepy.py would send in --megatron_config (not typed by hand)")
    parser.add_argument("--local_rank", type=int, help="set by the DeepSpeed launcher; ignored")
    for flag in entry.flags if entry else ():
        if flag.switch:
            parser.add_argument(flag.flag, action="store_const", const=True, dest=flag.key, help=flag.help)
        else:
            parser.add_argument(flag.flag, nargs="+", metavar=flag.metavar, dest=flag.key, help=flag.help)
    return parser


def flag_overrides(script: str, namespace: argparse.Namespace) -> dict:
    """{key: value} of the entry point's own flags that were given."""
    entry = ENTRY_POINTS.get(script)
    return {flag.key: getattr(namespace, flag.key) for flag in (entry.flags if entry else ())
            if getattr(namespace, flag.key) is not None}


# The accelerators DeepSpeed 0.19's get_accelerator() looks for before CUDA, by the module that brings
# each (deepspeed/accelerator/real_accelerator.py); XPU and MPS come with torch itself.
_OTHER_ACCELERATOR_MODULES = ("torch_npu", "torch_sdaa", "habana_frameworks", "torch_mlu", "torch_supa", "torch_xmlir")


def name_the_cpu_accelerator() -> None:
    """Where DeepSpeed would fall back to its CPU accelerator, name it (DS_ACCELERATOR=cpu) before
    DeepSpeed is imported: its automatic fallback prints "Setting accelerator to CPU..." in every
    process (launcher, per-node launcher, each rank) of every command, although running on CPU is what
    this project does without a GPU. The choice is the same; only the warning goes. A DS_ACCELERATOR the
    user set is kept, and a machine with any accelerator DeepSpeed knows is left to DeepSpeed."""
    if "DS_ACCELERATOR" in os.environ or torch.cuda.device_count() > 0:
        return
    if (hasattr(torch, "xpu") and torch.xpu.is_available()) or torch.backends.mps.is_available():
        return
    if any(importlib.util.find_spec(name) is not None for name in _OTHER_ACCELERATOR_MODULES):
        return
    os.environ["DS_ACCELERATOR"] = "cpu"
