"""The demo's green is blue's job with one fix, written as a developer would write it: the
example job must still have the line the fix goes after, and the result must be a valid job."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path

from cutover.cli.demo import JOBS, REVIEW_LIMIT, Demo


def test_green_is_blue_with_the_review_filter_added_and_nothing_else(tmp_path: Path) -> None:
    demo = Demo(argparse.Namespace(), tmp_path / "out")
    green = demo.green_job().read_text()
    blue = (JOBS / "windowed_totals.py").read_text()
    ast.parse(green)
    added = [line.strip() for line in green.splitlines() if line not in blue.splitlines()]
    assert added == ["# green: orders above the single-order limit are held for review",
                     f'.where(F.col("amount") <= F.lit({REVIEW_LIMIT}))']
