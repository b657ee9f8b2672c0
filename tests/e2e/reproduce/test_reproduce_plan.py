"""A sweep writes its report into its own folder, and into the published one only with --publish: `--report-only`
(in-process; the report's header asks git for the commit) from inputs in either (the plan:
tests/reproduce/test_reproduce_plan.py)."""
import pytest

from tests.support.reproduce import REPO_ROOT, planned_sweep_file as sweep_file, write_inputs
from tools.reproduce.__main__ import main


# the report's header asks git for the commit
def test_report_only_renders_into_the_sweeps_own_folder_unless_published(tmp_path, capsys, monkeypatch):
    sweep = sweep_file(tmp_path, code={"prefix": str(tmp_path / "absent" / "code_text_document"), "paper": "GitHub"})
    write_inputs(tmp_path / "published" / "inputs")
    monkeypatch.chdir(REPO_ROOT)
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
