"""The docs stay true: docs/config-reference.md is the one generated from the typed config groups; every
relative link of README.md and docs/ (and its #anchor) leads somewhere; README stays a front door."""
import pathlib
import re

import pytest


REPO = pathlib.Path(__file__).resolve().parents[2]


PAGES = [REPO / "README.md"] + sorted(p for p in (REPO / "docs").rglob("*.md")
                                      if p.relative_to(REPO / "docs").parts[0] not in ("reproduction", "images"))


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


README_LIMIT = 20_000  # bytes: what it is, the quick start, one command per task, the methods, the links


def anchors(page: pathlib.Path) -> set[str]:
    """GitHub's anchors of the page's headings: lower case, punctuation dropped, blanks to '-'."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
            for heading in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def test_anchors_follow_githubs_rule():
    page = REPO / "docs" / "positional-methods.md"
    assert {"adding-a-method", "hybrid-layers"} <= anchors(page)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_relative_link_leads_somewhere(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):  # http(s), mailto: not checked offline
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: no heading with that anchor in {linked.relative_to(REPO)}")
    assert not broken, f"{page.relative_to(REPO)}: {broken}"


def test_readme_is_a_front_door():
    size = len((REPO / "README.md").read_bytes())
    assert size <= README_LIMIT, f"README.md is {size} bytes; move what is not the front door into docs/"


def test_every_make_target_has_its_help_line():
    """`make help` prints the `## ` text after each target's name: every .PHONY target has one."""
    makefile = (REPO / "Makefile").read_text()
    phony = re.search(r"^\.PHONY: (.+)$", makefile, flags=re.M).group(1).split()
    described = set(re.findall(r"^([a-z-]+):.*## \S", makefile, flags=re.M))
    assert set(phony) == described, set(phony) ^ described


def test_the_config_reference_is_current(monkeypatch, capsys):
    """docs/config-reference.md holds what `python tools/docs/config_reference.py --check` generates from the
    typed config groups (its main, in this process: the check reads no more than the groups and the page)."""
    from tools.docs.config_reference import main
    monkeypatch.setattr("sys.argv", ["config_reference.py", "--check"])
    assert main() == 0, capsys.readouterr().err
