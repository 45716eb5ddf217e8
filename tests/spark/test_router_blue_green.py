"""Blue and green example jobs (real PySpark under ``cutover tag``) through the router.

The windowed example pair, side by side on one raw topic, one router worker, a switch at a
safe boundary once green has caught up, blue torn down at CLEAR_TO_TEARDOWN: the output holds
every closed window exactly once, from blue below its partition's boundary and from green at
or above it, in order, as recomputed from the input alone. This is the real-Spark cell S1 of
the conformance grid (tests/conformance/spark_slice.py); the others run in ``make
conformance``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conformance.runner import NEW, OLD
from tests.conformance.spark_slice import RAW_PARTITIONS, SPARK_CELLS, run_spark_cell

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def test_windowed_blue_then_green_through_the_router_equals_the_reference(
    bootstrap: str, tmp_path: Path
) -> None:
    cell = SPARK_CELLS[0]
    assert cell.job == "windowed_totals" and cell.handover == "ordered"
    r = run_spark_cell(cell, bootstrap, tmp_path)
    detail = (f"expected={r.expected} forwarded={r.forwarded} lost={r.lost} "
              f"dup={r.duplicated} wrong={r.wrong_version} unexpected={r.unexpected} "
              f"order={r.order_violations} dlq={r.dead_lettered} clear={r.clear_s}s "
              f"boundary={r.boundary} pins={r.pins} ({r.duration_s}s) {r.notes}")
    assert r.passed, "; ".join(r.reasons) + "\n" + detail
    assert r.expected >= 40, f"too few windows to prove anything: {detail}"
    assert r.forwarded == r.expected and r.order_violations == 0, detail
    assert r.boundary is not None and len(r.pins) == RAW_PARTITIONS
    assert r.clear_s is not None
    both = re.search(rf"reference: {OLD} (\d+), {NEW} (\d+)", " ".join(r.notes))
    assert both and int(both[1]) > 0 and int(both[2]) > 0, detail  # each version owns windows
