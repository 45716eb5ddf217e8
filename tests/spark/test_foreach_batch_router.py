"""The foreachBatch shape through the router: blue and green write their windows from
``foreachBatch`` with the batch Kafka writer, under ``cutover tag``, on one raw topic; one
router worker, a switch once green has caught up, blue torn down at CLEAR_TO_TEARDOWN. The
output holds every closed window exactly once, from the right version, in order, as recomputed
from the input alone. This is the real-Spark cell of the conformance grid for that shape
(tests/conformance/spark_slice.py); about two minutes, so it runs under ``make test-all``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance.spark_slice import RAW_PARTITIONS, SPARK_CELLS, run_spark_cell

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]


def test_foreach_batch_windows_blue_then_green_through_the_router_equal_the_reference(
    bootstrap: str, tmp_path: Path
) -> None:
    cell = next(c for c in SPARK_CELLS if c.job == "windowed_totals_foreach_batch")
    r = run_spark_cell(cell, bootstrap, tmp_path)
    detail = (f"expected={r.expected} forwarded={r.forwarded} lost={r.lost} "
              f"dup={r.duplicated} wrong={r.wrong_version} unexpected={r.unexpected} "
              f"order={r.order_violations} dlq={r.dead_lettered} clear={r.clear_s}s "
              f"boundary={r.boundary} pins={r.pins} ({r.duration_s}s) {r.notes}")
    assert r.passed, "; ".join(r.reasons) + "\n" + detail
    assert r.expected >= 40 and r.forwarded == r.expected and r.order_violations == 0, detail
    assert r.boundary is not None and len(r.pins) == RAW_PARTITIONS and r.clear_s is not None
