"""Hostile inputs, round 4: run names, result folders, RULER lengths, the GPU check's output, and what was
left over from round 3 (longrope factors, random-positions' tables, damaged model-states, a renamed step,
the Hugging Face export on a full disk, a long prefill, an imported fork's data keys). Config checks and
tools run in-process; the rows about an entry point's own behaviour launch it."""
import json
import os
import shutil
import subprocess
import sys

import pytest

from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from test_training_support import REPO_ROOT

TINY = REPO_ROOT / "configs" / "tiny.yml"


def config_error(**overrides) -> str:
    """The one-paragraph NeoXArgsError the config check gives for configs/tiny.yml with `overrides`."""
    with pytest.raises(NeoXArgsError) as info:
        NeoXArgs.from_ymls([TINY], overrides)
    message = str(info.value)
    assert "\n" not in message, message
    return message


# ------------------------------------------------------------------- rows 2 and 5: a run's name
@pytest.mark.parametrize("name, fragments", [
    ("KERPLE\n| forged | 0.01 |", ["run-name: ", "holds '\\n', which is not printable text",
                                  "a run's name is one line of printable characters"]),
    ("x" * 1_000_000, ["run-name: ", "is 1000000 characters long", "it may hold at most 100"]),
    ("   ", ["run-name: is empty"]),
], ids=["newline and pipe", "1 MB", "blank"])
def test_a_run_name_is_one_line_of_printable_text_of_bounded_length(name, fragments):
    message = config_error(run_name=name)
    for fragment in fragments:
        assert fragment in message, message
    assert "command line" in message and len(message) < 1000


def test_a_human_run_name_is_kept():
    name = "KERPLE-log, ALiBi on windowed layers | ablation (ü)"
    assert NeoXArgs.from_ymls([TINY], {"run_name": name}).run_name == name


# ------------------------------------------------------------- row 7: longrope factors that underflow
@pytest.mark.parametrize("factor, fragments", [
    (1e-300, ["short-factor[0] = 1e-300", "into inf in float32", "overflows and makes the rotation NaN"]),
    (1e38, ["short-factor[0] = 1e+38", "in float32", "underflows and makes the rotation NaN"]),
])
def test_longrope_factors_whose_inverse_frequencies_leave_float32_are_refused_at_the_check(factor, fragments):
    """Checked where the methods are first built, at start-up (the memory check builds them on the meta
    device), so before any step is spent; before, a NaN forward blamed the weights or the dtype."""
    from megatron.preflight import memory_problem
    pairs = 8  # tiny.yml: head dim 64 / 4 = 16, all rotated
    args = NeoXArgs.from_ymls([TINY], {"pos_emb": "rotary", "rotary_scaling": {
        "type": "longrope", "factor": 4, "original-max-position": 64,
        "short-factor": [factor] + [1.0] * (pairs - 1), "long-factor": [1.0] * pairs}})
    with pytest.raises(NeoXArgsError) as info:
        memory_problem(args, True, 257)
    message = str(info.value)
    for fragment in fragments + ["pos-emb 'rotary': rotary-scaling", "for pair 0, a factor between"]:
        assert fragment in message, message


# ----------------------------------------------------------- row 8: random-positions' distance table
def test_random_positions_whose_distance_table_cannot_fit_are_refused_with_the_largest_that_fits():
    import psutil
    from megatron.preflight import memory_problem
    args = NeoXArgs.from_ymls([TINY], {"pos_emb": "kerple_log", "random_positions": 10 ** 13})
    message = memory_problem(args, True, 257)
    assert message.startswith("random-positions 10,000,000,000,000 (command line) cannot fit: "), message
    assert "pos-emb kerple_log builds a per-distance table" in message and "20 bytes a distance" in message
    largest = int(message.split("The largest random-positions that fits is ")[1].split(" ")[0].replace(",", ""))
    # 4 heads + the distances, float32: the largest span is what is free (less the model) over 20 bytes.
    assert args.seq_length <= largest < psutil.virtual_memory().total // 20
    assert memory_problem(NeoXArgs.from_ymls([TINY], {"pos_emb": "kerple_log", "random_positions": 10 ** 6}),
                          True, 257) is None  # 20 MB
    # Rotary builds nothing per distance: round 3's 1e10 still trains.
    assert memory_problem(NeoXArgs.from_ymls([TINY], {"pos_emb": "rotary", "random_positions": 10 ** 13}),
                          True, 257) is None
