"""`python -m tools.reproduce SWEEP --dry-run` prints the plan before the commands (corpora present, prepared
by which command, or missing and how they are obtained; trainings and evaluations done and to do; where the
report goes; a time estimate and what it was computed from), and a sweep writes its report into its own
folder, the published one only with --publish. In-process: nothing is launched."""
import pathlib

import pytest
import yaml

from tools.reproduce.__main__ import main
from tools.reproduce.plan import LAUNCH_SECONDS
from tests.reproduce.test_reproduce_report import write_inputs

REPO = pathlib.Path(__file__).resolve().parents[2]


def sweep_file(tmp_path, **data) -> pathlib.Path:
    spec = {"name": "planned", "scale": "plan test", "profile": ["configs/tiny.yml"],
            "methods": ["kerple_log", "alibi"], "seeds": [1, 2], "datasets": list(data),
            "data": data, "evaluation": {"eval-lengths": [64, 128], "eval-modes": ["nonoverlap", "position"]},
            "set": {"train-iters": 10}, "windowed_baseline": "kerple_log",
            "work_dir": str(tmp_path / "work"), "report_dir": str(tmp_path / "published")}
    path = tmp_path / "sweep.yml"
    path.write_text(yaml.safe_dump(spec))
    return path


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
    # alibi (tests/reproduce/test_reproduce_report.py), and result files that record no evaluation time
    write_inputs(tmp_path / "published" / "inputs")
    plan, _ = dry_run(capsys, monkeypatch, sweep, "--jobs", "1")
    assert f"{tmp_path}/published/inputs: alibi 1.000, kerple_log 0.500 s/step" in plan
    assert f"Time: about {round((2 * 10 * 1.0 + 2 * 10 * 0.5 + 10 * LAUNCH_SECONDS) / 60)} min" in plan

    (tmp_path / "work/code/kerple_log/seed1/checkpoints/global_step10").mkdir(parents=True)
    plan, _ = dry_run(capsys, monkeypatch, sweep)
    assert "Trainings: 4: 1 done, 3 to do" in plan and "Evaluations: 6: 0 done, 6 to do" in plan


@pytest.mark.launches  # the report's header asks git for the commit
def test_report_only_renders_into_the_sweeps_own_folder_unless_published(tmp_path, capsys, monkeypatch):
    sweep = sweep_file(tmp_path, code={"prefix": str(tmp_path / "absent" / "code_text_document"), "paper": "GitHub"})
    write_inputs(tmp_path / "published" / "inputs")
    monkeypatch.chdir(REPO)
    from megatron.neox_arguments import NeoXArgsError
    with pytest.raises(NeoXArgsError, match=r"work/report/inputs holds no report inputs .* or add --publish to "
                                            r"re-render the published report in .*published from the inputs"):
        main([str(sweep), "--report-only"])
    assert main([str(sweep), "--report-only", "--publish"]) == 0
    assert (tmp_path / "published" / "report.md").is_file() and not (tmp_path / "work").exists()
    (tmp_path / "published" / "inputs").rename(tmp_path / "earlier")
    write_inputs(tmp_path / "work" / "report" / "inputs")
    published = (tmp_path / "published" / "report.md").read_text()
    assert main([str(sweep), "--report-only"]) == 0
    assert (tmp_path / "work" / "report" / "report.md").is_file()
    assert (tmp_path / "published" / "report.md").read_text() == published
