"""The repository's docs stand alone: no file points at the session's shared folder or at design
notes outside the repository (DESIGN.md, FORMATS.md, STYLE.md, TESTING.md live in docs/ as
design.md, formats.md, testing.md)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: A reference to something outside the repository, or to the design notes by their old names.
OUTSIDE = re.compile(
    r"\.\./shared\b|/work/shared\b|(?<![\w/.])(?:DESIGN|FORMATS|STYLE|TESTING)\.md\b|(?<![\w/])DESIGN §"
)
#: Files that must mention the old names (this test itself).
EXEMPT = {"tests/test_docs_standalone.py"}


def tracked_text_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    paths = [ROOT / p for p in out.decode().split("\0") if p and p not in EXEMPT]
    return [p for p in paths if p.is_file() and p.suffix not in {".parquet", ".gz", ".zip", ".png", ".arrow"}]


def test_no_file_points_outside_the_repository() -> None:
    hits = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()[:120]}")
    assert hits == [], "\n".join(hits)


def test_the_pattern_catches_each_old_reference() -> None:
    for line in ("see DESIGN.md §2", "(DESIGN §4)", "../shared/fixtures", "/work/shared/FORMATS.md",
                 "FORMATS.md §5", "(STYLE.md)", "TESTING.md's recipe"):  # fmt: skip
        assert OUTSIDE.search(line), line
    for line in ("docs/design.md §4", "[design.md §2](design.md)", "docs/formats.md §5", "_TIME_FORMATS"):
        assert not OUTSIDE.search(line), line


def design_sections() -> dict[int, int]:
    """docs/design.md's sections (``## N. …``) → how many numbered items each has (``N.`` lines)."""
    sections: dict[int, int] = {}
    current = None
    for line in (ROOT / "docs" / "design.md").read_text().splitlines():
        if m := re.match(r"## (\d+)\. ", line):
            current = int(m[1])
            sections[current] = 0
        elif current is not None and re.match(rf"{sections[current] + 1}\. ", line):
            sections[current] += 1
    return sections


def test_every_design_citation_names_a_section_that_exists() -> None:
    """``docs/design.md §3.6`` in a docstring must point at section 3, item 6."""
    sections = design_sections()
    assert sorted(sections) == list(range(1, 9))
    bad = []
    for path in tracked_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for cite in re.findall(r"design\.md §(\d+(?:\.\d+)?(?:–\d+)?)", text):
            for part in cite.split("–"):
                section, _, item = part.partition(".")
                if int(section) not in sections or (item and int(item) > sections[int(section)]):
                    bad.append(f"{path.relative_to(ROOT)}: §{cite}")
    assert bad == []
