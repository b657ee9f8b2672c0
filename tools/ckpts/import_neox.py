#!/usr/bin/env python
"""Import a GPT-NeoX or KERPLE-fork checkpoint (DeepSpeed's pipeline layout) into this project's.

    python -m tools.ckpts.import_neox SRC OUT [--config_file A.yml B.yml ...] [--pos-emb NAME] [--set K=V ...]

SRC is the run's `save` directory (or one global_stepN folder). The architecture comes from the run's
config: the configs/*.yml the run saved beside its weights, or --config_file (the files you trained
with, upstream keys and all). The positional method must be the config's `pos-emb` (or --pos-emb):
KERPLE-log and -power store the same parameter names, so the weights cannot tell them apart.
Then score it: `python evaluate.py OUT/global_stepN/configs/*.yml configs/eval/extrapolation.yml --set load=OUT`
(and `--set data-path=PREFIX` when the run's config names no data: the command it prints says so).
"""
import argparse
import pathlib
import sys

if __package__ in (None, ""):  # run as a script: make the repository importable
    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

from megatron.neox_arguments import run_cli  # noqa: E402
from megatron.neox_arguments import parse_overrides  # noqa: E402
from tools.ckpts.neox_import import import_checkpoint  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", help="the run's save directory, or one global_stepN folder in it")
    parser.add_argument("output", help="a new or empty folder for this project's checkpoint (evaluate with "
                        "--set load=OUTPUT); never another run's save folder")
    parser.add_argument("--config_file", "--config-file", nargs="+", help="the run's config files (default: "
                        "the configs/*.yml saved in the checkpoint)")
    parser.add_argument("--pos-emb", help="the run's positional method, when the config does not name it")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override a config key")
    ns = parser.parse_args(argv)
    folder, notes = import_checkpoint(ns.source, ns.output, ns.config_file, ns.pos_emb, parse_overrides(ns.set))
    print(f"imported {folder}")
    for note in notes:
        print(f"note: {note}")
    paths = sorted((folder / "configs").glob("*.yml"))
    data = [] if names_data(paths) else ["--set", "data-path=PREFIX"]
    if data:
        print("note: the run's config names no data (data-path, or test-data-paths for evaluate.py's test split), "
              "so the command below adds --set data-path=PREFIX: replace PREFIX with the .bin/.idx prefix of the "
              "data it was trained on (`make data` builds data/stdlib/stdlib_text_document)")
    print("evaluate: python evaluate.py " + " ".join([*map(str, paths), "configs/eval/extrapolation.yml",
                                                      "--set", f"load={ns.output}", *data]))


DATA_KEYS = ("data_path", "test_data_paths")  # where evaluate.py's split comes from (extrapolation.yml: test)


def names_data(paths) -> bool:
    """Whether the imported configs set a data key evaluate.py reads: a fork's saved config may hold none."""
    from megatron.neox_arguments.yaml_loader import load_config_files, normalise_key
    values, _, _ = load_config_files(paths)
    return any(normalise_key(key) in DATA_KEYS and value for key, value in values.items())


if __name__ == "__main__":
    run_cli(main)
