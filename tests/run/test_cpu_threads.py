"""The entry points' thread rule on CPU (megatron/run/cpu_threads.py): a share of the cores when the machine
is quiet, one thread when it is busy, an OMP_NUM_THREADS the user set kept as it is."""

import pytest

from megatron.run.cpu_threads import chosen_threads


@pytest.mark.parametrize("cores, processes, load, default, expected", [
    (2, 1, 0.3, 2, 2),     # quiet: torch's default, one per core
    (16, 1, 3.0, 16, 16),
    (16, 4, 3.0, 16, 4),   # four ranks on the machine: a quarter of the cores each
    (16, 32, 3.0, 16, 1),  # more ranks than cores: never zero
    (8, 1, 1.0, 4, 4),     # never more than torch's own default
    (2, 1, 2.0, 2, 1),     # busy: the load average has reached the cores
    (2, 1, 7.5, 2, 1),
])
def test_the_rule(cores, processes, load, default, expected):
    assert chosen_threads(cores, processes, load, default) == expected
