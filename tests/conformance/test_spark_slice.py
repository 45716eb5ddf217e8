"""The real-Spark slice of the conformance grid (``make conformance``), and its reference.

The cells run real PySpark jobs (about two minutes each), so only ``make conformance`` runs the
slice; its first cell also runs in the default suite as tests/spark/test_router_blue_green.py.
The reference tests below are fast: they pin down the window-end and per-partition boundary
rules the slice's verdicts rest on.
"""

from __future__ import annotations

import os
import time
from decimal import Decimal
from pathlib import Path

import pytest

from cutover.key_primary import Canary, primary_for
from cutover.plan import CutoverPlan, Segment
from router.rule.decision import Incoming, Outcome, PartitionRouter
from router.rule.identity import identity_function
from spark_tagger.testing import Order
from testground.brokers import BrokerUnderTest
from tests.conformance import report
from tests.conformance.runner import NEW, OLD, CellResult
from tests.conformance.scenario import Failure, Scenario
from tests.conformance.spark_slice import (
    CUSTOMERS,
    SPARK_CELLS,
    WINDOW_MS,
    SparkCell,
    canonical,
    enrich_value,
    parse_output,
    reference,
    run_spark_cell,
    version_by_plan,
)

T0 = 1_767_225_600_000  # 2026-01-01T00:00:00Z


def _order(i: int, customer: str, ts: int, amount: float = 10.5) -> Order:
    return Order(order_id=f"o{i}", customer=customer, country="US", amount=amount, ts=ts)


def test_windowed_reference_decides_by_window_end_and_the_partition_pin() -> None:
    """A window's event time is its end (exclusive): the window [T-10s, T) belongs to green
    when T is the boundary. Each partition uses its own (pinned) boundary; windows the final
    watermark never closed are not expected at all."""
    orders = [_order(0, "c001", T0 + 1_000, 10.25), _order(1, "c001", T0 + 9_999, 0.5),
              _order(2, "c001", T0 + 10_000), _order(3, "c004", T0 + 15_000),
              _order(4, "c004", T0 + 40_000)]
    # c001 -> partition 3, c004 -> partition 1 (on 4 raw partitions)
    pins = {0: T0 + 10_000, 1: T0 + 25_000, 2: T0 + 10_000, 3: T0 + 10_000}
    ref = reference("windowed_totals", orders, pins, final_wm=T0 + 30_000)
    assert {(p, k.decode(), t - T0): v for (p, k, t), (v, _) in ref.items()} == {
        (3, "c001", 10_000): NEW,     # end == the boundary: green's
        (3, "c001", 20_000): NEW,
        (1, "c004", 20_000): OLD,     # below partition 1's later pin: blue's
    }                                 # the window ending at +50 s is still open
    _, blue_first = ref[(3, b"c001", T0 + WINDOW_MS)]
    spark_json = (b'{"customer":"c001","window_start":"2026-01-01T00:00:00.000Z",'
                  b'"window_end":"2026-01-01T00:00:10.000Z","orders":2,"total":11,'
                  b'"max_amount":10.25}')
    ident, fields = parse_output("windowed_totals", spark_json)
    assert ident == b"c001" and canonical(fields) == blue_first  # green: 10.75 -> 11
    blue_json = spark_json.replace(b'"total":11,"max_amount":10.25', b'"total":10.75')
    assert canonical(parse_output("windowed_totals", blue_json)[1]) != blue_first


def test_canary_reference_decides_per_key_by_the_plan_and_each_boundary_pin() -> None:
    """A canary cell's reference: the plan's segment at the record's event time (with each
    boundary as pinned on the record's partition), then the key's bucket. c004 (bucket 1995)
    is in a 30% canary (buckets < 3000), c001 (bucket 9768) is not."""
    plan = CutoverPlan.model_validate({"route": "r", "epoch": 3, "segments": [
        {"from_event_time": None, "primary": OLD},
        {"from_event_time": T0 + 20_000, "primary": OLD,
         "canary": {"version": NEW, "share": 0.3}},
        {"from_event_time": T0 + 50_000, "primary": NEW}]})
    # c001 -> partition 3, c004 -> partition 1; partition 1 pinned the canary's boundary later
    pins = [{p: T0 + (30_000 if p == 1 else 20_000) for p in range(4)},
            {p: T0 + 50_000 for p in range(4)}]
    orders = [_order(i, c, T0 + s * 1_000) for i, (c, s) in enumerate(
        (c, s) for c in ("c001", "c004") for s in (5, 15, 25, 35, 45, 55, 65))]
    ref = reference("windowed_totals", orders, pins[-1], final_wm=T0 + 70_000,
                    plan=(plan, pins))
    got = {(k.decode(), (t - T0) // 1000): v for (_, k, t), (v, _) in ref.items()}
    assert got == {
        ("c001", 10): OLD, ("c001", 20): OLD, ("c001", 30): OLD, ("c001", 40): OLD,
        ("c001", 50): NEW, ("c001", 60): NEW, ("c001", 70): NEW,
        ("c004", 10): OLD, ("c004", 20): OLD,   # below partition 1's pin (30 s)
        ("c004", 30): NEW, ("c004", 40): NEW, ("c004", 50): NEW, ("c004", 60): NEW,
        ("c004", 70): NEW}
    assert version_by_plan(plan, pins, 3, None, T0 + 40_000) == OLD  # keyless: the primary


def test_the_canary_cell_catches_keys_on_both_sides() -> None:
    """The canary cell's share gives green some of the customers and blue the others."""
    (cell,) = [c for c in SPARK_CELLS if c.canary is not None]
    seg = Segment(from_event_time=1, primary=OLD,
                  canary=Canary(version=NEW, share=cell.canary or 0))
    owners = {primary_for(seg.rule, f"c{i:03d}".encode()) for i in range(CUSTOMERS)}
    assert owners == {OLD, NEW}
    assert len({c.id for c in SPARK_CELLS}) == len(SPARK_CELLS)


def test_enrich_reference_skips_small_orders_and_formats_like_spark() -> None:
    orders = [_order(0, "c001", T0 + 5_000, 120.0), _order(1, "c001", T0 + 6_000, 4.99),
              _order(2, "c004", T0 + 7_000, 160.0)]
    ref = reference("enrich_orders", orders, {p: T0 + 6_500 for p in range(4)}, T0)
    assert sorted((k, v) for (_, k, _), (v, _) in ref.items()) == [(b"o0", OLD), (b"o2", NEW)]
    assert enrich_value(OLD, orders[0])["tier"] == "high"
    assert enrich_value(NEW, orders[0])["tier"] == "normal"  # green's bar is 150
    spark_json = (b'{"order_id":"o0","customer":"c001","country":"US","amount":120.00,'
                  b'"amount_eur":110.40,"tier":"high","ts":%d}' % (T0 + 5_000))
    assert canonical(parse_output("enrich_orders", spark_json)[1]) == ref[(3, b"o0", T0 + 5_000)][1]
    assert enrich_value(OLD, orders[0])["amount_eur"] == Decimal("110.40")


def test_grid_and_spark_sections_of_the_document_keep_each_other(tmp_path: Path) -> None:
    """``make conformance`` writes the emulated grid, then the real-Spark section: each writer
    replaces only its own part of docs/conformance.md."""
    doc = tmp_path / "conformance.md"
    spark = CellResult(cell=SPARK_CELLS[0].scenario(), job="windowed_totals", expected=7,
                       forwarded=7, clear_s=1.0)
    grid = CellResult(cell=Scenario(sources=1, divergence="none", idle="none",
                                    failure=Failure.NONE, identity="record",
                                    handover="ordered"), expected=5, forwarded=5, clear_s=1.0)
    kafka = BrokerUnderTest("127.0.0.1:1", "kafka", "4.1.1", 3)
    tansu = BrokerUnderTest("127.0.0.1:2", "tansu", "0.1.2")
    report.write_spark([spark], kafka, 1.0, {report.spark_key(spark)}, path=doc)
    report.write([grid], kafka, 1, 1.0, set(), path=doc)
    report.write([grid, grid], tansu, 1, 1.0, set(), path=doc)
    report.write_spark([spark, spark], kafka, 2.0, set(), path=doc)
    report.write([grid], kafka, 1, 1.0, set(), path=doc)
    text = doc.read_text()
    assert text.count("## Real Spark jobs on Apache Kafka 4.1.1") == 1
    assert text.count("## Emulated grid on Apache Kafka 4.1.1 (KRaft, 3 brokers") == 1
    assert text.count("## Emulated grid on Tansu") == 1 and text.count("# Conformance") == 1
    assert "**1/1 cells pass**" in text and "**2/2 cells pass**" in text
    assert "**2/2 real-Spark cells pass**" in text
    assert text.index("grid on Apache") < text.index("grid on Tansu") < text.index("Real Spark")
    assert "| S2: real Spark `windowed_totals` |" in text and "S1 (CI)" not in text


class _SetStore(set):  # type: ignore[type-arg]
    """The decision core's dedup store as a set (the rule needs only ``in`` and ``add``)."""

    def add(self, identity: bytes, event_time: int = 0) -> None:  # type: ignore[override]
        super().add(identity)


def _plan(epoch: int, *segments: tuple[int | None, str]) -> CutoverPlan:
    return CutoverPlan.model_validate({"route": "r", "epoch": epoch, "segments": [
        {"from_event_time": t, "primary": v} for t, v in segments]})


def test_ordered_handover_with_a_windowed_batch_below_its_own_watermark() -> None:
    """What real-Spark cell S3 caught, on the decision core: a windowed job's micro-batch with
    watermark W emits the windows that W closes, so every record of that batch carries W and
    lies below it. Green's held records may go out only after the whole batch (its heartbeat),
    not at its first record, or blue's later records below the boundary come after them."""
    r = PartitionRouter(0, identity=identity_function("record"), store=_SetStore(),
                        retention_ms=10**9, ordered=True)
    r.apply_plan(_plan(1, (None, OLD)))
    r.apply_plan(_plan(2, (None, OLD), (100, NEW)))
    forwarded: list[tuple[str, int | None]] = []

    def feed(rec: Incoming) -> None:
        forwarded.extend((d.record.version, d.record.event_time) for d in r.observe(rec)
                         if d.outcome is Outcome.FORWARD)

    feed(Incoming(NEW, 110, 110, b"c1", b"green window ending 110"))  # green ahead: held
    for t in (100, 90):  # blue's batch at watermark 115 closes the windows ending 100 and 90
        feed(Incoming(OLD, t, 115, b"c1", f"blue window ending {t}".encode()))
    feed(Incoming(OLD, None, 115, heartbeat=True))  # the end of blue's batch
    assert forwarded == [(OLD, 90), (NEW, 110)]


CELLS_ENV = "CUTOVER_SPARK_CELLS"  # e.g. "6" or "1,6": run only these cells (1-based)


def selected_cells(spec: str | None) -> tuple[SparkCell, ...]:
    """The cells to run: all, or those numbered (from 1) in ``spec``."""
    if not spec:
        return SPARK_CELLS
    return tuple(SPARK_CELLS[int(i) - 1] for i in spec.split(",") if i.strip())


@pytest.mark.conformance_full
@pytest.mark.spark
@pytest.mark.broker
def test_real_spark_slice(kafka_cluster: BrokerUnderTest, tmp_path: Path) -> None:
    """Every real-Spark cell runs and gets its row in docs/conformance.md, passing or not;
    then the test fails if any cell did."""
    started = time.monotonic()
    results: list[CellResult] = []
    bootstrap = kafka_cluster.bootstrap
    cells = selected_cells(os.environ.get(CELLS_ENV))
    print(f"\nreal-Spark slice: {len(cells)} cells, on {kafka_cluster.describe()}",
          flush=True)
    for i, cell in enumerate(cells, 1):
        r = run_spark_cell(cell, bootstrap, tmp_path / f"spark{i}")
        results.append(r)
        print(f"{r.job}: " + report.progress_line(i, len(cells), r), flush=True)
    if len(cells) == len(SPARK_CELLS):  # a selection of cells leaves the table as it was
        report.write_spark(results, kafka_cluster, time.monotonic() - started,
                           {report.spark_key(results[0])})
        print(f"wrote {report.DOC}", flush=True)
    failed = [r for r in results if not r.passed]
    assert not failed, "\n".join(f"{r.job}: " + report.progress_line(0, 0, r) for r in failed)
