"""The docs hold together and stay readable: every relative link in the README, docs/ and the tests' and
bench's maps resolves to a file (and its `#anchor` to a heading of that file, by GitHub's slug rule), and
README.md with docs/*.md stays within a word budget (issue 58: docs that state the present)."""

from __future__ import annotations

import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAX_WORDS = 45_000  # README.md + docs/*.md, counted as `wc -w` counts
LINK = re.compile(r"\]\(([^)\s]+)\)")


def pages(root: Path) -> list[Path]:
    """The markdown pages whose links are checked: the README, docs/, and the two maps where present."""
    found = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return found + [p for p in (root / "tests" / "README.md", root / "bench" / "README.md") if p.exists()]


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, all but letters, digits, `_`, `-` and spaces dropped,
    spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading's anchor, outside code blocks; a repeated heading gets GitHub's `-1`, `-2`, ..."""
    found, seen, code = set(), Counter[str](), False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            code = not code
        elif not code and (heading := re.match(r"^#{1,6} (.+?)#*$", line)):
            base = slug(heading[1])
            found.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return found


def broken_links(page: Path) -> list[str]:
    """Every relative link of `page` whose file, or whose anchor in a markdown file, does not exist."""
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        if not resolved.exists():
            broken.append(f"{page.name}: {target} (no such file)")
        elif anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
            broken.append(f"{page.name}: {target} (no such heading)")
    return broken


def words(root: Path) -> int:
    """README.md and docs/*.md in words, as `wc -w` counts them."""
    return sum(len(p.read_text().split()) for p in [root / "README.md", *(root / "docs").glob("*.md")])


@pytest.mark.parametrize("page", [str(p.relative_to(REPO)) for p in pages(REPO)])
def test_every_relative_link_resolves_to_a_file_and_a_heading(page: str) -> None:
    assert broken_links(REPO / page) == []


def test_the_link_check_catches_a_broken_link_in_a_copy_of_the_docs(tmp_path: Path) -> None:
    """Mutation: the real pages, copied, with a link to a missing page, one to a missing heading of another
    page and one to a missing heading of the same page; a heading that exists and a URL pass."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    page = tmp_path / "docs" / "benchmark.md"
    assert broken_links(page) == []
    heading = sorted(anchors(tmp_path / "README.md"))[0]
    page.write_text(
        page.read_text() + f"\n[a](gone.md) [b](../README.md#no-such-section) [c](#no-such-section)"
        f" [d](../README.md#{heading}) [e](https://example.com/x)\n"
    )
    assert broken_links(page) == [
        "benchmark.md: gone.md (no such file)",
        "benchmark.md: ../README.md#no-such-section (no such heading)",
        "benchmark.md: #no-such-section (no such heading)",
    ]


def test_anchors_follow_githubs_slug_rule_and_number_repeated_headings(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "# `make bench`: the score path\n\n## Feast's online store\n\n## Notes\n\n```\n# not a heading\n```\n## Notes\n"
    )
    assert anchors(page) == {"make-bench-the-score-path", "feasts-online-store", "notes", "notes-1"}


def test_the_readme_and_docs_stay_within_the_word_budget() -> None:
    assert words(REPO) <= MAX_WORDS, f"README.md + docs/*.md: {words(REPO):,} words, over {MAX_WORDS:,}"


def test_the_word_budget_check_catches_a_page_grown_past_it(tmp_path: Path) -> None:
    """Mutation: a copy of the docs with one page grown past the budget fails the count."""
    shutil.copy(REPO / "README.md", tmp_path / "README.md")
    shutil.copytree(REPO / "docs", tmp_path / "docs")
    assert words(tmp_path) == words(REPO)
    (tmp_path / "docs" / "grown.md").write_text("word " * (MAX_WORDS - words(REPO) + 1))
    assert words(tmp_path) > MAX_WORDS
