"""The merged config of a run as one YAML file: what a checkpoint keeps beside copies of the config
files, because the files alone miss the `--set` overrides (a run with `--set num-layers=3` would
otherwise leave a configs/tiny.yml that says 2, and loading the checkpoint with it fails)."""
import json

from megatron.checkpoint.folder import RESOLVED_NAME  # noqa: F401 (re-exported: the file this module writes)


def resolved_yaml(args) -> str:
    """Every key the run's config files and `--set` gave, with the value the run used and where it
    came from; the keys not listed had their defaults. Loadable as a config file on its own. Values
    are written as JSON, which YAML reads back as the same values."""
    rows = [(key, json.dumps(value), args.config_sources.get(key, "?"))
            for key, value in sorted(args.user_values().items())]
    width = min(max((len(k) + len(v) for k, v, _ in rows), default=0), 40) + 2
    lines = [f"{key}: {value}{' ' * max(width - len(key) - len(value), 2)}# {source}" for key, value, source in rows]
    return ("# The merged config of the run that saved this checkpoint: every key its config files and --set\n"
            "# gave, with where each came from (the keys not listed had their defaults). Use it to load the\n"
            "# checkpoint, e.g. python evaluate.py THIS_FILE configs/eval/tiny.yml\n" + "\n".join(lines) + "\n")
