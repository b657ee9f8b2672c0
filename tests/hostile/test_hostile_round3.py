"""Hostile inputs, round 3 (issue 40), the config values checked before anything is allocated from them, in this
process: `deepy.py train.py CONFIG --dry-run` run through deepy's own main (run_cli prints the one paragraph, exit
status 2; a launch shows that paragraph reaching the terminal: tests/e2e/hostile/test_hostile_config.py), and the
options of one method refused under another. The refusals that need a run or a checkpoint:
tests/e2e/hostile/test_hostile_round3.py."""
import pytest

from megatron.neox_arguments import NeoXArgs, NeoXArgsError
from tests.support.hostile import assert_clear_error, entry_point_in_process
from tests.support.training import TINY


@pytest.mark.parametrize("value", ["[[1, 2]]", "[rotary]", "[null]"])
def test_layer_pattern_entries_that_are_not_mappings_are_named(value, monkeypatch, capsys):
    result = entry_point_in_process(monkeypatch, capsys, "deepy.py", "train.py", TINY, "--dry-run",
                                "--set", f"layer-pattern={value}")
    assert_clear_error(result, "layer-pattern: entry 1 of 1 is ", "each entry is a mapping such as")


@pytest.mark.parametrize("setting, key", [("fox-gate-bias-init=1e300", "fox-gate-bias-init"),
                                          ("attention-temperature={init: 1e300}", "attention-temperature.init")])
def test_numbers_beyond_float32_are_refused(setting, key, monkeypatch, capsys):
    result = entry_point_in_process(monkeypatch, capsys, "deepy.py", "train.py", TINY, "--dry-run",
                                "--set", "pos-emb=fox", "--set", setting)
    assert_clear_error(result, f"{key}: is beyond what float32 holds (about 3.4e38)")


@pytest.mark.parametrize("key, value, owner", [("path-forget-gate", True, "path"), ("cable-unscaled-scores", True, "cable"),
                                               ("stickbreaking-attend-current", True, "stickbreaking"),
                                               ("fox-gate-bias-init", 0.0, "fox")])
def test_a_new_methods_option_under_another_method_is_refused_not_ignored(key, value, owner):
    # These options change the model; set under another pos-emb they would be silently lost.
    with pytest.raises(NeoXArgsError) as err:
        NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, "pos-emb": "kerple_log", key: value})
    assert (f"{key}: is set, but pos-emb is 'kerple_log', which has no such option (only {owner} does). Remove it, "
            f"or set pos-emb to {owner}.") in str(err.value)
    NeoXArgs.from_dict({"train-micro-batch-size-per-gpu": 1, "pos-emb": owner, key: value})  # its own method takes it
