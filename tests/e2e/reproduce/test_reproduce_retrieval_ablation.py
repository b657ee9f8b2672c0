"""The retrieval ablation's report rendered by `--report-only` from hand-made probe records, and training
variants without the `ablation:` key described, not judged (in-process; the report's header asks git for the
commit: the verdicts themselves are tests/reproduce/test_reproduce_retrieval_ablation.py's)."""
import yaml

from megatron.evaluation.results import write_atomic
from tests.support.retrieval_ablation import LENGTHS, SEEDS, SWEEP, at, documents, first


def render(tmp_path, monkeypatch, ablation_key) -> str:
    from tools.reproduce.__main__ import REPO_ROOT, main
    spec = yaml.safe_load(SWEEP)
    spec["training_variants"]["kerple_log"]["bf16"] = {"precision": "bf16"}
    spec.update(datasets=["code"], data={"code": {"prefix": str(tmp_path / "absent" / "code_text_document")}},
                evaluation={"eval-lengths": list(LENGTHS), "eval-modes": ["nonoverlap", "kv-retrieval"], "eval-chunks": 8},
                seeds=list(SEEDS), work_dir=str(tmp_path / "work"), report_dir=str(tmp_path / "report"))
    if ablation_key:
        spec["ablation"] = ablation_key
    (tmp_path / "sweep.yml").write_text(yaml.safe_dump(spec))
    inputs = tmp_path / "report" / "inputs"
    hits = {"kerple_log": at(first(40), lambda L: first(30)), "kerple_log+per-layer": at(first(40), lambda L: first(10)),
            "kerple_log+bf16": at(first(40), lambda L: first(30)), "alibi": at(first(40), lambda L: first(20))}
    for document in documents(hits, with_ppl=True):
        write_atomic(inputs / "results" / f"{document['run']['name']}.json", {k: v for k, v in document.items() if k != "path"})
    write_atomic(inputs / "scalars.json", {})
    write_atomic(inputs / "facts.json", {"dataset_tokens": {"code": 1000}, "trained_commits": ["abc"]})
    monkeypatch.chdir(REPO_ROOT)
    assert main([str(tmp_path / "sweep.yml"), "--report-only", "--publish"]) == 0
    return (tmp_path / "report" / "report.md").read_text()


def test_the_retrieval_ablation_report(tmp_path, monkeypatch):
    report = render(tmp_path, monkeypatch, {"method": "kerple_log", "anchor": "alibi", "measure": "kv-retrieval"})
    assert "**Answer: Makes KERPLE-log's retrieval worse at every long length: `per-layer` on code.**" in report
    assert "| R2. switch `bf16` | **no significant effect** |" in report
    assert "| kerple_log+per-layer | 1.00 / 1.00 / 1.00 | 1.00 / 1.00 / 1.00 | 0.25 / 0.25 / 0.25 | 0.25 / 0.25 / 0.25 |" in report
    assert "DAPE-V2 KERPLE-log ppl (theirs)" in report and "Training variants beside their parent" not in report
    assert (tmp_path / "report" / "ablation_retrieval.png").is_file() and (tmp_path / "report" / "ablation_ppl.png").is_file()


def test_training_variants_without_the_key_are_described_not_judged(tmp_path, monkeypatch):
    report = render(tmp_path, monkeypatch, None)
    assert "## Training variants beside their parent method" in report
    assert "## The ablation" not in report and "switch" not in report and "DAPE" not in report
    # kv-retrieval at 512: 10 of 40 right against 30, 20 pairs one way per seed: p = 2 x 0.5^60.
    rows = {tuple(line.split(" | ")[:3]): line for line in report.splitlines() if line.startswith("| kerple_log+")}
    assert rows["| kerple_log+per-layer", "kerple_log", "512"].endswith(f"| 0.75 | 0.25 | p = {2 * 0.5 ** 60:.2g} | **lower** |")
    assert rows["| kerple_log+bf16", "kerple_log", "512"].endswith("| 0.75 | 0.75 | no test | – |")
    assert rows["| kerple_log+bf16", "kerple_log", "64"].endswith("| 1.00 | 1.00 | no test | – |")
    assert "(ppl_vs_length.png)" in report and (tmp_path / "report" / "ppl_vs_length.png").is_file()
    assert not (tmp_path / "report" / "ablation_ppl.png").exists()
