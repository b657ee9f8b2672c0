"""Loose ends of issue 24's rounds: output-path checks take a name too long for the file system
(through the config's one NAME_MAX check) instead of crashing on it; values in positional and probe
messages are quoted (bounded); an integer key refuses a float that cannot hold it exactly and an
integer beyond 64 bits."""
import os
import pathlib

import pytest

from megatron.probes.kv_retrieval import pairs_problem
from megatron.model.positional_embeddings import OptionError, make_options, rope_scaling
from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from megatron.output_paths import path_problem
from megatron.output_paths import name_too_long, new_file_problem, new_folder_problem
from tests.support.training import TINY

LONG = "n" * 300


# ------------------------------------------------------------------------- names too long
@pytest.mark.parametrize("relative", [False, True])
def test_a_300_character_name_is_reported_not_raised(tmp_path, monkeypatch, relative):
    monkeypatch.chdir(tmp_path)
    base = pathlib.Path(".") if relative else tmp_path
    for path in (base / LONG, base / LONG / "samples.jsonl", base / "new" / LONG):
        problem = name_too_long(path)
        assert problem.endswith(path_problem(str(path))) and "is 300 bytes long, more than the 255" in problem
        assert new_file_problem(path) == problem and new_folder_problem(path) == problem
        assert len(problem) < 400
    assert name_too_long(base / ("n" * 255)) is None and new_folder_problem(base / ("n" * 255)) is None
    assert not os.listdir(tmp_path)  # nothing created


def test_a_path_longer_than_path_max_is_reported_not_raised(tmp_path):
    path = tmp_path.joinpath(*["d" * 200] * 25)  # every name fits, the whole does not
    problem = new_file_problem(path / "samples.jsonl")
    assert "the filesystem allows for a whole path (PATH_MAX)" in problem and len(problem) < 400


# --------------------------------------------------------------------------- quoted values
def test_rotary_scaling_values_are_quoted_and_bounded():
    problem = rope_scaling.scaling_problem({"type": "yarn", "factor": "x" * 100_000})
    assert problem.startswith("factor must be a number >= 1") and "...(cut)" in problem and len(problem) < 400
    assert "...(cut)" in rope_scaling.scaling_problem({"type": "t" * 100_000, "factor": 2})
    assert "...(cut)" in rope_scaling.scaling_problem({f"k{i}": 1 for i in range(10_000)})
    assert "unknown key(s) ['1']" in rope_scaling.scaling_problem({1: 2})  # not an AttributeError on a number key
    assert "...(cut)" in rope_scaling.scaling_problem(list(range(100_000)))


def test_mep_values_are_quoted_and_bounded_and_a_weight_that_is_no_number_is_one_message():
    with pytest.raises(OptionError) as err:
        make_options("mep_kerple", {"mep_kernels": ["gaussian"] * 10_000, "mep_weights": None})
    assert "...(cut)" in err.value.message and len(err.value.message) < 500
    with pytest.raises(OptionError, match=r"mep-weights=\['a', 'b', 'c', 'd'\] must be 4 positive numbers"):
        make_options("mep_kerple", {"mep_kernels": ["gaussian", "exponential", "t5", "kerple_log"],
                                    "mep_weights": ["a", "b", "c", "d"]})


def test_probe_pairs_are_quoted_and_bounded():
    problem = pairs_problem(list(range(100_000)))
    assert "...(cut)" in problem and len(problem) < 400


# ----------------------------------------------------------------------------- integer keys
@pytest.mark.parametrize("value, message", [
    (1e300, r"train-iters must be an integer, got 1e\+300, a float too large to hold one exactly \(floats do up "
            r"to 2\^53 = 9,007,199,254,740,992\)\. Write the integer you mean in digits\."),
    (10 ** 30, r"train-iters must be an integer within \+-9,223,372,036,854,775,807 \(a 64-bit integer, what torch, "
               r"numpy and DeepSpeed hold\), got 1000000000000000000000000000000\."),
    (10 ** 4000, r"train-iters must be an integer within .*, got <an integer of 13288 bits>\."),
    (1.5, r"train-iters must be an integer, got 1\.5 \(float\)\."),
], ids=["1e300", "10**30", "10**4000", "1.5"])
def test_an_integer_key_refuses_what_is_no_exact_64_bit_integer(value, message):
    with pytest.raises(NeoXArgsError, match=r"^command line: " + message) as err:
        NeoXArgs.from_ymls([TINY], {"train_iters": value})
    assert "\n" not in str(err.value) and len(str(err.value)) < 400


def test_an_integer_key_takes_a_whole_float_it_can_hold():
    assert NeoXArgs.from_ymls([TINY], {"train_iters": 1e5}).train_iters == 100_000
    assert NeoXArgs.from_ymls([TINY], {"seed": 2 ** 63 - 1}).seed == 2 ** 63 - 1
    assert NeoXArgs.from_ymls([TINY], {"checkpoint_factor": 2.0 ** 53}).checkpoint_factor == 2 ** 53


def test_eval_task_limit_is_checked_once_with_the_config():
    import megatron.evaluation.lm_eval_run as lm_eval_run
    assert not hasattr(lm_eval_run, "check_task_keys")
    with pytest.raises(NeoXArgsError, match="eval-task-limit: must be a whole number of documents per task"):
        NeoXArgs.from_ymls([TINY], {"eval_task_limit": 0})
