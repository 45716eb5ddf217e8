"""Every pointer from the code to a section of the manual leads to a heading that exists: a
message or docstring that says `README, "Quickstart: your Kafka, your job"` or
`docs/security.md, "Access control"` names a heading of that page, word for word (quoted, or
unquoted up to the ';' or ')' that ends it). A page rewritten under the code is found here, not
by the operator the message sends to a section that is gone."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [p for d in ("router", "cutover", "spark_tagger") for p in
           sorted((ROOT / d).rglob("*.py"))]
CODE = PRODUCT + sorted((ROOT / "tests").rglob("*.py"))
# `README, "Section"` or `docs/page.md, "Section"`, the quotes possibly escaped in a string.
QUOTED = re.compile(r'\b(README(?:\.md)?|docs/[\w./-]+\.md),\s+\\?"([^"\\]+)\\?"')
UNQUOTED = re.compile(r"\b(README(?:\.md)?|docs/[\w./-]+\.md),\s+([A-Z][\w -]{0,60}?)\s*[;)]")
# Vague pointers, in the product's messages and docstrings, that a reader cannot follow to one
# place.
VAGUE = re.compile(r"\bthe README's\b|\bthe README says\b")

def headings(page: Path) -> set[str]:
    out: set[str] = set()
    in_code = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and re.match(r"#{1,6} ", line):
            out.add(line.lstrip("#").strip())
    return out


def references(text: str) -> list[tuple[str, str]]:
    """(page, section) of every pointer, with a docstring's or string's line breaks joined."""
    flat = re.sub(r"""["']?\s*\n\s*(?:#\s*)?[fr]?["']?""", " ", text)
    flat = re.sub(r" {2,}", " ", flat)
    found = QUOTED.findall(flat)
    quoted_at = {m.start() for m in QUOTED.finditer(flat)}
    found += [(m.group(1), m.group(2)) for m in UNQUOTED.finditer(flat)
              if m.start() not in quoted_at and not m.group(2).startswith('"')]
    return [("README" if page == "README.md" else page, section.strip())
            for page, section in found]


def test_every_section_the_code_points_at_is_a_heading_of_its_page() -> None:
    broken: set[tuple[str, str, str]] = set()
    seen = 0
    for path in CODE:
        if path == Path(__file__):
            continue   # its examples
        rel = path.relative_to(ROOT).as_posix()
        for page, section in references(path.read_text()):
            seen += 1
            target = ROOT / ("README.md" if page == "README" else page)
            if not target.is_file() or section not in headings(target):
                broken.add((rel, page, section))
    assert seen >= 10, "the pattern no longer finds the code's references"
    assert broken == set(), sorted(broken)


def test_the_code_points_at_a_section_not_at_the_readme_in_general() -> None:
    vague = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in PRODUCT
             for m in VAGUE.finditer(p.read_text())]
    assert vague == []


def test_a_reference_is_read_across_a_docstrings_line_break() -> None:
    text = '"""(docs/design.md, "Durability: the output log is the record of\n    truth")."""'
    assert references(text) == [("docs/design.md",
                                 "Durability: the output log is the record of truth")]
    assert references("f'create it (README, Topics; or not)'") == [("README", "Topics")]
    assert references('"(README, Access control; `cutover doctor` checks it)"') == [
        ("README", "Access control")]
