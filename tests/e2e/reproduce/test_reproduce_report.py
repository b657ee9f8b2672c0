"""`python -m tools.reproduce SWEEP --report-only` re-renders the report from the inputs beside it alone
(no work folder, no data, no checkpoints), from hand-made result files and training scalars."""
import json
import pathlib
import shutil
import subprocess
import sys

import pytest

from tests.support.reproduce import REPO_ROOT as REPO, handmade_sweep_file as sweep_file, reproduce, write_inputs


def test_report_only_renders_from_the_inputs_beside_the_report(tmp_path):
    sweep = sweep_file(tmp_path)
    write_inputs(tmp_path / "report" / "inputs")
    result = reproduce(sweep, "--report-only")
    assert result.returncode == 0, result.stdout + result.stderr
    report = (tmp_path / "report" / "report.md").read_text()
    assert "re-rendered from the inputs beside it" in report and "runs trained at abcdef1234" in report
    assert "`code` (123,456 tokens, ByteLevelTokenizer, stand-in for the paper's GitHub)" in report
    assert "6 of 6 planned runs have results." in report
    assert "| code | kerple_log | 2 | 2.0000 |" in report  # training curves, from scalars.json
    assert "| kerple_log | 0.5000 ± 0.0000 | 2 |" in report and "| alibi | 1.0000 ± 0.0000 | 2 |" in report
    assert "4. KERPLE-log's position-wise loss" in report and "(position_code.png)" in report
    assert (tmp_path / "report" / "table3.csv").read_text().count("kerple_log+window64") == 2


def test_report_only_without_inputs_says_how_to_get_them(tmp_path):
    result = reproduce(sweep_file(tmp_path), "--report-only")
    assert result.returncode == 2
    assert "holds no report inputs" in result.stderr and "without --report-only once" in result.stderr
    assert "Traceback" not in result.stderr


PUBLISHED = [("configs/reproduce/cpu-mini.yml", "docs/reproduction", ["--datasets", "stdlib", "prose"]),
             ("configs/reproduce/cpu-mini-long.yml", "docs/reproduction/long-training", []),
             ("configs/reproduce/cpu-mini-retrieval.yml", "docs/reproduction/retrieval", []),
             ("configs/reproduce/cpu-mini-ablation.yml", "docs/reproduction/ablation", []),
             ("configs/reproduce/cpu-mini-2026.yml", "docs/reproduction/methods-2026", []),
             ("configs/reproduce/cpu-mini-retrieval-2026.yml", "docs/reproduction/retrieval-2026", []),
             ("configs/reproduce/cpu-mini-retrieval-ablation.yml", "docs/reproduction/retrieval-ablation", []),
             ("configs/reproduce/cpu-mini-frontier.yml", "docs/reproduction/frontier", []),
             ("configs/reproduce/cpu-mini-retrieval-frontier.yml", "docs/reproduction/retrieval-frontier", []),
             ("configs/reproduce/cpu-mini-attention-2026.yml", "docs/reproduction/attention-2026", []),
             ("configs/reproduce/cpu-mini-length-2026.yml", "docs/reproduction/length-2026", []),
             ("configs/reproduce/cpu-mini-length-retrieval-2026.yml", "docs/reproduction/length-retrieval-2026", [])]


def _body(text: str) -> list[str]:
    """The report without the lines that say when, where and how it was rendered."""
    return [line for line in text.splitlines() if not line.startswith(("- Command:", "- Commit:", "- Generated:", "- Sweep:"))]


# Every published report re-rendered by one process, one `python -m tools.reproduce SWEEP --report-only --publish`
# call of its main() after another, each into its own copy: one start-up (3.4 s of CPU: tools.reproduce and
# matplotlib's imports) instead of one a report. Each report's test below checks its own copy; the command line
# itself (`python -m tools.reproduce ... --report-only`) is the first two tests'.
RENDER_ALL = """
import contextlib, io, json, sys
from tools.reproduce.__main__ import main
outcomes = {}
for key, argv in json.loads(sys.argv[1]).items():
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as stopped:
            code = stopped.code
        except Exception as error:  # the report's test says what went wrong, the others still run
            code, err = 1, io.StringIO(f"{type(error).__name__}: {error}")
    outcomes[key] = {"code": code, "stderr": err.getvalue()}
print(json.dumps(outcomes))
"""


@pytest.fixture(scope="module")
def re_rendered(request, tmp_path_factory) -> dict:
    """report_dir -> (the re-rendered copy, its outcome) for each published report a test of this run asks for."""
    wanted = {item.callspec.params["report_dir"] for item in request.session.items
              if item.path == request.path and hasattr(item, "callspec") and "report_dir" in item.callspec.params}
    folders, argvs = {}, {}
    for sweep, report_dir, args in PUBLISHED:
        if report_dir not in wanted:
            continue
        tmp_path = tmp_path_factory.mktemp(pathlib.Path(sweep).stem)
        copy = tmp_path / "report"
        shutil.copytree(REPO / report_dir, copy, ignore=shutil.ignore_patterns("long-training", "retrieval", "ablation"))
        spec = (REPO / sweep).read_text().replace(f"report_dir: {report_dir}\n", f"report_dir: {copy}\n")
        assert str(copy) in spec
        (tmp_path / "sweep.yml").write_text(spec)
        for figure in copy.glob("*.png"):
            if not figure.name.startswith("kernel_"):
                figure.unlink()  # must be drawn again
        folders[report_dir] = copy
        argvs[report_dir] = [str(tmp_path / "sweep.yml"), *args, "--report-only", "--publish"]
    done = subprocess.run([sys.executable, "-c", RENDER_ALL, json.dumps(argvs)], cwd=REPO, capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    outcomes = json.loads(done.stdout.splitlines()[-1])
    return {report_dir: (folders[report_dir], outcomes[report_dir]) for report_dir in folders}


@pytest.mark.parametrize("sweep,report_dir,args", PUBLISHED, ids=[pathlib.Path(s).stem for s, _, _ in PUBLISHED])
def test_published_reports_re_render_from_their_committed_inputs(re_rendered, sweep, report_dir, args):
    """The published reports, rendered again from the inputs committed beside them: the same tables,
    verdicts and text, and byte-identical figures (kernel figures need checkpoints: kept as they are)."""
    published = REPO / report_dir
    copy, done = re_rendered[report_dir]
    assert done["code"] == 0, done["stderr"]
    assert (copy / "table3.csv").read_bytes() == (published / "table3.csv").read_bytes()
    assert _body((copy / "report.md").read_text()) == _body((published / "report.md").read_text())
    for figure in published.glob("*.png"):
        assert (copy / figure.name).read_bytes() == figure.read_bytes(), figure.name
