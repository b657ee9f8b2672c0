"""`python -m tools.reproduce SWEEP --dry-run` prints the plan before the commands (corpora present, prepared
by which command, or missing and how they are obtained; trainings and evaluations done and to do; where the
report goes; a time estimate and what it was computed from). In-process: nothing is launched (where the report
goes: tests/e2e/reproduce/test_reproduce_plan.py)."""
import pathlib

import pytest
import yaml

from tests.support.reproduce import planned_sweep_file as sweep_file, write_inputs
from tools.reproduce.__main__ import main
from tools.reproduce.plan import LAUNCH_SECONDS
from tools.reproduce.spec import SweepError

REPO = pathlib.Path(__file__).resolve().parents[2]


def dry_run(capsys, monkeypatch, *argv) -> tuple[str, list[str]]:
    monkeypatch.chdir(REPO)  # main() moves to the repository root; monkeypatch moves back
    assert main([*map(str, argv), "--dry-run"]) == 0
    plan, commands = capsys.readouterr().out.split("# Commands\n")
    return plan, commands.splitlines()


def test_a_published_corpus_not_built_here_is_named_missing_with_the_command_that_builds_it(tmp_path, capsys,
                                                                                            monkeypatch):
    if (REPO / "data" / "corpora" / "prose.jsonl.zst").exists():
        pytest.skip("data/corpora/prose.jsonl.zst is built in this checkout")
    (tmp_path / "code").mkdir()
    for ext in (".bin", ".idx"):
        (tmp_path / "code" / f"code_text_document{ext}").write_bytes(b"")
    sweep = sweep_file(tmp_path, code={"prefix": str(tmp_path / "code" / "code_text_document")},
                       prose={"source": "data/corpora/prose.jsonl.zst",
                              "prefix": str(tmp_path / "prose" / "prose_text_document")})
    plan, commands = dry_run(capsys, monkeypatch, sweep)
    assert f"  code: present ({tmp_path}/code/code_text_document.bin/.idx)" in plan
    assert ("  prose: data/corpora/prose.jsonl.zst is not on this machine; it is tokenized from "
            "data/corpora/prose.jsonl.zst, which `python tools/datasets/prepare_data.py prose` builds from the public "
            "packages it came from") in plan
    assert "its runs are left out" in plan
    # 2 seeds x 2 methods trained, + the windowed baseline evaluated: of `code` only
    assert "Trainings: 4: 0 done, 4 to do" in plan and "Evaluations: 6: 0 done, 6 to do" in plan
    assert len(commands) == 10 and not any("prose" in c for c in commands)
    assert f"the report in {tmp_path}/work/report/ (the published report in {tmp_path}/published/ is " \
           "rewritten only with --publish)" in plan


def test_a_missing_built_in_corpus_is_prepared_by_the_sweep(tmp_path, capsys, monkeypatch):
    prefix = tmp_path / "std" / "stdlib_text_document"
    sweep = sweep_file(tmp_path, stdlib={"builder": "stdlib", "prefix": str(prefix)})
    plan, commands = dry_run(capsys, monkeypatch, sweep)
    assert (f"  stdlib: missing; the sweep prepares it first: python tools/datasets/build_default_corpus.py "
            f"--output-dir {tmp_path}/std --name stdlib") in plan
    assert len(commands) == 10


def test_the_estimate_says_what_it_was_computed_from(tmp_path, capsys, monkeypatch):
    sweep = sweep_file(tmp_path, code={"prefix": str(tmp_path / "absent" / "code_text_document"), "paper": "GitHub"})
    plan, _ = dry_run(capsys, monkeypatch, sweep)
    assert "`python tools/datasets/prepare_data.py code --data-dir" in plan  # a corpus of the paper's, absent
    assert "Trainings: 0: 0 done, 0 to do" in plan

    sweep = sweep_file(tmp_path, code={"builder": "stdlib", "prefix": str(tmp_path / "std" / "code_text_document")})
    plan, _ = dry_run(capsys, monkeypatch, sweep)
    assert "Time: no estimate: no earlier run of this sweep left report inputs" in plan and "--step-seconds" in plan
    plan, _ = dry_run(capsys, monkeypatch, sweep, "--step-seconds", "0.5", "--jobs", "1")
    # 4 trainings x 10 steps x 0.5 s, no evaluation measured, 10 launches
    assert f"Time: about {round((20 + 10 * LAUNCH_SECONDS) / 60)} min: 40 training steps at 0.5 s/step as " \
           "stated" in plan
    assert "none measured for alibi, kerple_log, kerple_log+window64: counted as 0 s" in plan

    # An earlier run's inputs beside the published report: hand-made, 0.5 s a step for kerple_log and 1 s for
    # alibi (tests/support/reproduce.py), and result files that record no evaluation time
    write_inputs(tmp_path / "published" / "inputs")
    plan, _ = dry_run(capsys, monkeypatch, sweep, "--jobs", "1")
    assert f"{tmp_path}/published/inputs: alibi 1.000, kerple_log 0.500 s/step" in plan
    assert f"Time: about {round((2 * 10 * 1.0 + 2 * 10 * 0.5 + 10 * LAUNCH_SECONDS) / 60)} min" in plan

    (tmp_path / "work/code/kerple_log/seed1/checkpoints/global_step10").mkdir(parents=True)
    plan, _ = dry_run(capsys, monkeypatch, sweep)
    assert "Trainings: 4: 1 done, 3 to do" in plan and "Evaluations: 6: 0 done, 6 to do" in plan


def test_bad_sweep_is_one_clear_error(tmp_path, monkeypatch):
    """Read before anything is planned; how the command prints such a refusal (one paragraph, status 2, no
    traceback): tests/e2e/reproduce/test_reproduce_report.py::test_report_only_without_inputs_says_how_to_get_them."""
    sweep = tmp_path / "sweep.yml"
    sweep.write_text(yaml.safe_dump({"name": "x", "scale": "x", "profile": ["configs/tiny.yml"],
                                     "methods": ["kerple_log", "kerple"], "seeds": [1], "datasets": ["d"],
                                     "data": {"d": {"builder": "stdlib"}}, "evaluation": {"eval-lengths": [64]}}))
    monkeypatch.chdir(REPO)
    with pytest.raises(SweepError, match=r"`methods`: 'kerple' is not a pos-emb"):
        main([str(sweep), "--dry-run"])
