"""Synthetic retrieval probes made on the fly (no downloads): the generators (passkey.py,
kv_retrieval.py, sharing common.py), their scoring (scoring.py) and the record both evaluation modes
write (record.py). The training mix (megatron/data/probe_mix.py) uses the same generators.

Each generator module has `fixed_tokens(tokenizer, ...)`, `make_sample(stream, tokenizer, length,
depth, seed, ...)` and `make_grid(...)`; a probe's name is also its evaluation mode's name."""
import importlib

TASKS = {"passkey": "passkey", "kv-retrieval": "kv_retrieval"}  # name -> generator module in this folder


def generator(task: str):
    """The generator module of probe `task` (imported on first use: the config only needs the names)."""
    return importlib.import_module(f"{__name__}.{TASKS[task]}")
