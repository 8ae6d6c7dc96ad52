"""The front page and the manual hold together: README.md stays a front page, every relative
link (and its #anchor) in README.md, CONTRIBUTING.md and docs/ leads somewhere, every docs page
says what it covers (with contents when it is long), a command's row repeated in a docs page
is the README's row, and every repository path the pages name in code spans exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers import ROOT

PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
ROW = re.compile(r"^\| (`weightsearch ([a-z-]+)[^`]*`)")
FOLDERS = ("benchmarks", "data", "docker", "examples", "recommender", "results", "scripts",
           "service", "studies", "sweep", "tests", "trainer", "weightsearch")
# A path in a code span that starts at one of the repository's folders (`trainer/loop.py`);
# `name` and `<...>` mark a file the reader creates or a pattern, not a file of the repository.
REPO_PATH = re.compile(rf"(?<![\w/.~])(?:{'|'.join(FOLDERS)})/[\w./-]*")


def _prose(text: str) -> str:
    """The text without fenced code blocks, where brackets are code, not links."""
    return re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)


def _anchors(path: Path) -> set[str]:
    """The #anchors GitHub gives the page's headings."""
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path.read_text()).splitlines():
        heading = re.match(r"^#{1,6}\s+(.*)$", line)
        if not heading:
            continue
        slug = re.sub(r"[^\w\- ]", "", heading.group(1).strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _links(path: Path) -> list[str]:
    return [t for t in LINK.findall(_prose(path.read_text()))
            if not re.match(r"^[a-z]+:", t)]  # http:, https:, mailto:


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page: Path):
    broken = []
    for target in _links(page):
        file, _, anchor = target.partition("#")
        dest = (page.parent / file).resolve() if file else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert broken == []


def test_the_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < 200
    assert "bash scripts/test.sh" in text  # CI runs the README's test command
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in text, f"README's table does not lead to docs/{page.name}"


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda p: p.name)
def test_a_docs_page_says_what_it_covers_and_long_ones_have_contents(page: Path):
    lines = page.read_text().splitlines()
    assert lines[0].startswith("# ") and lines[1] == "" and lines[2].strip(), page.name
    if len(lines) > 150:
        assert "## Contents" in lines, f"{page.name} has {len(lines)} lines and no contents"


def test_a_command_row_in_the_docs_is_the_readmes_row():
    readme = {m.group(2): m.group(1) for line in (ROOT / "README.md").read_text().splitlines()
              if (m := ROW.match(line))}
    for page in sorted((ROOT / "docs").glob("*.md")):
        for line in page.read_text().splitlines():
            found = ROW.match(line)
            if found:
                assert found.group(1) == readme.get(found.group(2)), (page.name, found.group(1))


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_a_page_names_exists(page: Path):
    spans = re.findall(r"`([^`\n]+)`", _prose(page.read_text()))
    named = {m.rstrip(".") for span in spans if "<" not in span
             for m in REPO_PATH.findall(span) if not re.search(r"(^|[/_])name\.", m)}
    assert sorted(p for p in named if not (ROOT / p).exists()) == []
