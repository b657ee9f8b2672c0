"""Synthetic retrieval probes made on the fly (no downloads): the generators (passkey.py, kv_retrieval.py,
sharing common.py), used by the evaluation modes of the same names (their scoring and record:
megatron/evaluation/retrieval) and by the training mix (megatron/data/probe_mix.py). A leaf package: it
imports nothing of evaluation, data or the config.

Each generator module has `Options` (its config keys, declared with `option(...)`),
`fixed_tokens(tokenizer, ...)`, `make_sample(stream, tokenizer, length, depth, seed, ...)` and
`make_grid(...)`; a probe's name is also its evaluation mode's name. `TrainOptions` below are the
config keys of the training mix.
"""
import importlib
from dataclasses import dataclass
from typing import Literal, Optional

from megatron.model.positional_embeddings.base import OptionError, option
from megatron.quoting import quote

from .kv_retrieval import pairs_problem

TASKS = {"passkey": "passkey", "kv-retrieval": "kv_retrieval"}  # name -> generator module in this folder


def generator(task: str):
    """The generator module of probe `task`."""
    return importlib.import_module(f"{__name__}.{TASKS[task]}")


def _fraction_problem(fraction) -> str | None:
    if 0 <= fraction <= 1:
        return None
    return (f"must lie in [0, 1] (the fraction of training samples replaced by probe-train-task samples), got "
            f"{quote(fraction)}.")


@dataclass
class TrainOptions:
    """The training mix's keys (megatron/data/probe_mix.py), checked together when built."""
    probe_train_task: Optional[Literal[tuple(TASKS)]] = option(
        None, "Mix this retrieval probe (the evaluation mode's own generator) into training: a "
        "probe-train-fraction of the training samples become one probe sample of seq-length, its filler "
        "that sample's own text, depth uniform in [0, 1]. Validation and test stay plain text.")
    probe_train_fraction: float = option(
        0.0, "Fraction of training samples replaced by probe-train-task samples (each chosen by the "
        "sample's index and `seed`, so resuming sees the same ones); > 0 exactly when a task is set.",
        check=_fraction_problem)
    probe_train_kv_pairs: Optional[int] = option(
        None, "probe-train-task kv-retrieval: key-value pairs per training prompt; default probe-kv-pairs' "
        "default. A small model learns to fetch one value from far back long before it learns to match one "
        "key among several.", check=pairs_problem)

    def __post_init__(self):
        task, fraction, pairs = self.probe_train_task, self.probe_train_fraction, self.probe_train_kv_pairs
        if pairs is not None and task != "kv-retrieval":
            raise OptionError("probe_train_kv_pairs", f"is {quote(pairs)}, but probe-train-task is {quote(task)}, "
                              "not 'kv-retrieval', so no training prompt has pairs. Set probe-train-task: "
                              "kv-retrieval, or remove probe-train-kv-pairs.")
        if task is None and fraction > 0:
            raise OptionError("probe_train_fraction", f"is {quote(fraction)}, but probe-train-task is not set, so "
                              f"there is nothing to mix in. Set probe-train-task ({' or '.join(TASKS)}), or remove "
                              "probe-train-fraction.")
        if task is not None and fraction == 0:
            raise OptionError("probe_train_task", f"is {quote(task)}, but probe-train-fraction is 0, so no training "
                              "sample would be one. Set probe-train-fraction in (0, 1] (e.g. 0.5), or remove "
                              "probe-train-task.")
