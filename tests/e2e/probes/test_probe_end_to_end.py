"""`python evaluate.py configs/tiny.yml configs/eval/probe.yml --set load=...` on a briefly trained tiny
rotary model evaluated with YaRN scaling: the printed grid, the record's fields, the heatmap beside the
result file; and the one-message errors of a too-short length and of scaling a non-rotary method, from the same
code in this process."""
import json
import re

import pytest
from tests.support.training import TINY, pretrain, run_script, set_flags, tiny_args, tiny_overrides

from megatron.neox_arguments import NeoXArgsError


PROBE = TINY.parent / "eval" / "probe.yml"


@pytest.fixture(scope="module")
def trained(stdlib_data, tmp_path_factory):
    """8 steps of configs/tiny.yml with rotary, as train.py trains them (tests/support/training.py's pretrain, in
    this process: the evaluation is what these tests launch)."""
    folder = tmp_path_factory.mktemp("probe")
    values = tiny_overrides(stdlib_data, folder, pos_emb="rotary")
    pretrain(tiny_args(stdlib_data, folder, pos_emb="rotary"))
    return folder, values


def overrides(trained, lengths, extra) -> dict:
    folder, values = trained
    return {"pos_emb": "rotary", "data_path": values["data_path"], "split": values["split"], "load": values["load"],
            "eval_results_dir": str(folder / "results"), **extra, "eval_lengths": lengths, "probe_depths": [0.0, 1.0]}


def evaluate(trained, lengths="[128, 256]", **extra):
    return run_script(["evaluate.py", str(TINY), str(PROBE), *set_flags(overrides(trained, lengths, extra))])


def evaluate_here(trained, lengths, **extra):
    """What evaluate.py runs, in this process: its refusals come from the config package and the evaluation
    driver (how evaluate.py prints one: the named-run and missing-checkpoint tests under tests/e2e/evaluation/)."""
    from megatron.evaluation.driver import evaluate_run
    from megatron.neox_arguments import NeoXArgs
    return evaluate_run(NeoXArgs.from_ymls([TINY, PROBE], overrides(trained, lengths, extra)).evaluation_run())


def test_prints_the_grid_writes_the_record_and_the_heatmap(trained):
    done = evaluate(trained, probe_samples=2, rotary_scaling="{type: yarn, factor: 4, original-max-position: 64}")
    assert done.returncode == 0, done.stderr[-3000:]
    for length in (128, 256):
        assert f"passkey L={length} greedy accuracy by depth  0:" in done.stdout
    (result,) = (trained[0] / "results").glob("*.json")
    document = json.loads(result.read_text())
    # The scaled evaluation is its own method: it can never merge into the plain rotary run's file.
    assert document["run"]["method"].startswith("rotary+yarn4-") and "rotary+yarn4-" in result.name
    records = document["results"]
    assert [r["length"] for r in records] == [128, 256]
    for record in records:
        assert len(record["probe_logprob"]) == len(record["probe_greedy_exact"]) == 4
        assert len(record["depth_accuracy"]) == 2 and all(0 <= a <= 1 for a in record["depth_accuracy"])
        assert all(lp < 0 for lp in record["probe_logprob"]) and not record["greedy_recomputed"]
    assert result.with_name(result.stem + "_passkey.png").is_file()


def test_a_length_too_short_for_the_needle_is_one_clear_error(trained):
    with pytest.raises(NeoXArgsError, match="eval-lengths: length 64 cannot hold the passkey probe"):
        evaluate_here(trained, [64], eval_results_dir=str(trained[0] / "short"))


def test_scaling_a_non_rotary_method_is_one_clear_error(trained):
    with pytest.raises(NeoXArgsError, match=re.escape("rotary-scaling: is set, but pos-emb is 'alibi', which has no "
                                                      "such option (only rotary does)")):
        evaluate_here(trained, [128, 256], pos_emb="alibi", rotary_scaling={"type": "linear", "factor": 2})
