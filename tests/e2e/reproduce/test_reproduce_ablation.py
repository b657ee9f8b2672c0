"""An ablation's report section rendered by `--report-only` from hand-made inputs (in-process; the report's
header asks git for the commit, and execute.py ldconfig for libc: the verdicts themselves are
tests/reproduce/test_reproduce_ablation.py's)."""
import yaml

from megatron.evaluation.results import write_atomic
from tests.support.ablation import FLAT, LENGTHS, RISING, SEEDS, SWEEP, documents
from tests.support.reproduce import REPO_ROOT


def test_report_only_renders_the_ablation_section(tmp_path, monkeypatch, capsys):
    from tools.reproduce.__main__ import main
    spec = yaml.safe_load(SWEEP)
    spec.update(datasets=["code"], data={"code": {"prefix": str(tmp_path / "absent" / "code_text_document"),
                                                   "paper": "ArXiv"}},
                evaluation={"eval-lengths": list(LENGTHS), "eval-chunks": 40}, seeds=list(SEEDS),
                work_dir=str(tmp_path / "work"), report_dir=str(tmp_path / "report"))
    (tmp_path / "sweep.yml").write_text(yaml.safe_dump(spec))
    inputs = tmp_path / "report" / "inputs"
    for document in documents({"kerple_log": FLAT, "kerple_log+per-layer": RISING,
                               "kerple_log+per-layer+bf16": FLAT, "alibi": lambda L: 2.05}):
        write_atomic(inputs / "results" / f"{document['run']['name']}.json", {k: v for k, v in document.items() if k != "path"})
    write_atomic(inputs / "scalars.json", {})
    write_atomic(inputs / "facts.json", {"dataset_tokens": {"code": 1000}, "trained_commits": ["abc"]})
    monkeypatch.chdir(REPO_ROOT)
    assert main([str(tmp_path / "sweep.yml"), "--report-only", "--publish"]) == 0
    report = (tmp_path / "report" / "report.md").read_text()
    assert "**Answer (40 chunks per length): Reproduces the DAPE-V2 degradation: `per-layer` on code.**" in report
    assert "| 2. switch `per-layer+bf16` | **no significant effect** |" in report
    assert "DAPE-V2 KERPLE-log ppl (theirs)" in report and "| 16× | 9.08 (L = 8192) | 1.987 |" in report
    assert "trained variants: kerple_log+per-layer, kerple_log+per-layer+bf16" in report
    assert "| L | CI at 5 | seed spread at 5 | CI at 40 | seed spread at 40 |" in report
    assert "**Does the chunk count decide a verdict?**" in report
    assert "12 of 12 planned runs have results." in report
    assert (tmp_path / "report" / "ablation_ppl.png").is_file() and not (tmp_path / "report" / "ppl_vs_length.png").exists()
    assert "(ablation_chunks.png)" in report and (tmp_path / "report" / "ablation_chunks.png").is_file()
