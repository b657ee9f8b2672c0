"""Bad `ruler` entries of a sweep YAML are one clear error, and --dry-run names the RULER tasks (the sweep that runs
RULER: tests/e2e/reproduce/test_reproduce_ruler.py)."""
import pytest
import yaml

from tests.support.reproduce import REPO_ROOT, ruler_sweep_file
from tools.reproduce.__main__ import main
from tools.reproduce.spec import SweepError, load_sweep


@pytest.mark.parametrize("ruler,message", [
    (["niah_single_1"], r"`ruler`: must be a mapping with keys tasks and \(optional\) limit"),
    ({"tasks": ["niah_single_1"], "samples": 3}, r"`ruler`: must be a mapping with keys tasks"),
    ({"tasks": []}, r"`ruler.tasks`: must be a non-empty list of RULER task names"),
    ({"tasks": ["ruler_qa_squad"]}, r"`ruler.tasks`: 'ruler_qa_squad': lm-eval 0.4.13 downloads its data on every "
                                    r"run, and the sweep's eval.py runs offline; the RULER tasks that need no data "
                                    r"are niah_single_1, "),
    ({"tasks": ["niah_single_9"]}, r"`ruler.tasks`: 'niah_single_9' is not one of lm-eval 0.4.13's RULER tasks "
                                   r"\(niah_single_1, "),
    ({"tasks": ["niah_single_1", "niah_single_1"]}, r"`ruler.tasks`: names a task twice"),
    ({"tasks": ["niah_single_1"], "limit": 0}, r"`ruler.limit`: must be a positive whole number of samples per "
                                               r"length, got 0"),
])
def test_bad_ruler_entry_is_one_clear_error(tmp_path, ruler, message):
    path = tmp_path / "sweep.yml"
    path.write_text(yaml.safe_dump({"name": "x", "scale": "x", "profile": ["configs/tiny.yml"],
                                    "methods": ["kerple_log"],
                                    "seeds": [1], "datasets": ["d"], "data": {"d": {"builder": "stdlib"}},
                                    "evaluation": {"eval-lengths": [64]}, "ruler": ruler}))
    with pytest.raises(SweepError, match=message):
        load_sweep(path)



def test_dry_run_says_the_ruler_tasks(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # main() moves to the repository root; monkeypatch moves back
    assert main([str(ruler_sweep_file(tmp_path, {"tasks": ["niah_single_1", "ruler_fwe"]})), "--dry-run"]) == 0
    assert ("RULER: niah_single_1, ruler_fwe by eval.py after each evaluation, 20 samples per length at [64, 512]"
            in capsys.readouterr().out)
