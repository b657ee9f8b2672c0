"""`python evaluate.py configs/tiny.yml configs/eval/probe.yml --set load=...` on a briefly trained tiny
rotary model evaluated with YaRN scaling: the printed grid, the record's fields, the heatmap beside the
result file, and the one-message errors of a too-short length and of scaling a non-rotary method."""
import json

import pytest
from tests.support.training import TINY, run_script, set_flags, tiny_overrides


PROBE = TINY.parent / "eval" / "probe.yml"


@pytest.fixture(scope="module")
def trained(stdlib_data, tmp_path_factory):
    folder = tmp_path_factory.mktemp("probe")
    values = tiny_overrides(stdlib_data, folder, pos_emb="rotary")
    done = run_script(["train.py", str(TINY), *set_flags(values)])
    assert done.returncode == 0, done.stderr[-3000:]
    return folder, values


def evaluate(trained, lengths="[128, 256]", **extra):
    folder, values = trained
    flags = set_flags({"pos_emb": "rotary", "data_path": values["data_path"], "split": values["split"],
                       "load": values["load"],
                       "eval_results_dir": str(folder / "results"), **extra})
    return run_script(["evaluate.py", str(TINY), str(PROBE), *flags,
                       "--set", f"eval-lengths={lengths}", "--set", "probe-depths=[0.0, 1.0]"])


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
    done = evaluate(trained, lengths="[64]", eval_results_dir=str(trained[0] / "short"))
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "eval-lengths: length 64 cannot hold the passkey probe" in done.stderr


def test_scaling_a_non_rotary_method_is_one_clear_error(trained):
    done = evaluate(trained, pos_emb="alibi", rotary_scaling="{type: linear, factor: 2}")
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "rotary-scaling: is set, but pos-emb is 'alibi', which has no such option (only rotary does)" in done.stderr
