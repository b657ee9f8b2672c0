"""Where each shipped config keeps its checkpoints (issue 23): every paper config a folder of its own, so
training one method after another never resumes or refuses the other's; tiny.yml the folder of its own
pos-emb under checkpoints/tiny/, the layout `make demo` writes for every method."""
import pathlib

import pytest

from megatron.model.positional_embeddings import available
from megatron.neox_arguments import NeoXArgs
from megatron.neox_arguments.yaml_loader import load_config_files, normalise_key

CONFIGS = pathlib.Path(__file__).resolve().parents[2] / "configs"
PAPER = sorted(p for p in CONFIGS.glob("*.yml") if "extends: [162M.yml, local_setup.yml]" in p.read_text())


def test_every_method_has_a_paper_config_with_its_own_folder():
    assert {config.stem for config in PAPER} <= set(available()), "a paper config names no registered method"
    folders = {}
    for config in PAPER:
        args = NeoXArgs.from_ymls([config])
        assert args.save == args.load == f"checkpoints/{config.stem}", config.name
        assert args.config_sources["save"] == f"{config}:5", "set by the method's own file"
        folders.setdefault(args.save, []).append(config.name)
    assert all(len(names) == 1 for names in folders.values()), folders
    # A method a user adds as one file (docs/positional-methods.md) has no paper config, and needs none to
    # train on configs/tiny.yml; the shipped methods each have theirs, checked above.
    without = sorted(set(available()) - {config.stem for config in PAPER})
    if without:
        pytest.skip(f"methods with no configs/<method>.yml (added after checkout?): {without}")


def test_local_setup_names_no_checkpoint_folder():
    """A folder there would be shared by every paper config (or silently overridden by each)."""
    values, _, _ = load_config_files([CONFIGS / "local_setup.yml"])
    assert not {"save", "load"} & {normalise_key(k) for k in values}


@pytest.mark.parametrize("pos_emb", ["kerple_log", "sinusoidal"])
def test_tiny_folder_is_the_demos_for_its_method(pos_emb):
    """tiny.yml as it stands loads what `make demo` trained for kerple_log; the demo passes the same
    layout, checkpoints/tiny/<method>, for every other method."""
    args = NeoXArgs.from_ymls([CONFIGS / "tiny.yml"])
    assert args.save == args.load == f"checkpoints/tiny/{args.pos_emb}" == "checkpoints/tiny/kerple_log"
    makefile = (CONFIGS.parent / "Makefile").read_text()
    demo = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    assert "--set save=checkpoints/tiny/$$method" in demo and "--set load=checkpoints/tiny/$$method" in demo
    assert pos_emb in makefile.split("DEMO_METHODS :=", 1)[1].splitlines()[0]
