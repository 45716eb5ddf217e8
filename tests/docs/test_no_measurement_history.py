"""The router's docstrings and comments state the rule and why, not the measurements that led
to it: figures of CPU per record, medians of alternating runs, what was measured when, commit
hashes. Those live in the decision records (docs/decisions/NNN-title.md) and in git log."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOURCES = sorted([*(ROOT / "router").rglob("*.py"), *(ROOT / "router").rglob("*.[ch]")])
HISTORY = [
    re.compile(r"\d\s?(?:us|µs|ns)\b"),                 # 3.61 us of CPU per raw record
    re.compile(r"\balternating (?:rounds|runs)\b", re.I),
    re.compile(r"\bmedians?\b", re.I),
    re.compile(r"\bmeasured\b", re.I),
    re.compile(r"\btried, not kept\b", re.I),
    re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"),   # a commit hash
]

def history_lines(path: Path) -> list[str]:
    """``path:line: text`` of each line that carries measurement history."""
    return [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
            for n, line in enumerate(path.read_text().splitlines(), 1)
            if is_history(line)]


def is_history(line: str) -> bool:
    return any(p.search(line) for p in HISTORY)


def test_the_routers_docstrings_and_comments_carry_no_measurement_history() -> None:
    found = {p.relative_to(ROOT).as_posix(): history_lines(p) for p in SOURCES}
    assert [line for lines in found.values() for line in lines] == []


def test_the_patterns_find_what_they_are_for() -> None:
    assert is_history('"""Six alternating rounds: 3.61 vs 4.14 us of CPU per raw record."""')
    assert is_history("# measured on the router benchmark")
    assert is_history("(docs/performance.md, 67b8919)")
    assert not is_history("x = 0x7fffffff  # a mask; the decision: docs/decisions/008")
    assert not is_history("# How long a partition's producer lets its records gather")
