"""The unmodified example jobs, blue and green side by side under ``cutover tag``.

One run per module: the windowed job's two versions and the enrichment job's two versions all
read the same input at once; each pair writes to one shared raw topic (the default layout).
Every record is checked against what it must be, recomputed from the input and the checkpoint:
contents, event time (the window's end; the order's time), the batch that emitted it and that
batch's watermark.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_HALF_EVEN, ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest
from spark_test_support import (
    JOBS,
    OffsetLog,
    TagRun,
    assign_batches,
    committed_batches,
    expected_watermarks,
    offset_logs,
    orders_by_position,
    tag_command,
)

from cutover.cli.orders import EventSpec, Order, make_orders, write_orders
from cutover.headers import BATCH, EVENT_TIME, KIND, VERSION, WATERMARK, parse_headers
from spark_tagger.partitioner import partition_for
from testground.brokers import create_topics
from tests.topics import RawRecord, read_topic

# Slow (make test-all): four Spark jobs before the first test. The default suite keeps the
# windowed job end to end through the router (test_router_blue_green.py) and the event-time rules
# (test_event_time.py); heartbeats on idle partitions are in the conformance grid's idle cells.
pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

WINDOW_MS = 10_000
DELAY_MS = 5_000
RAW_PARTITIONS = 8  # more partitions than customers: some get only heartbeats
SPEC = EventSpec(seed=11, count=480, customers=4, step_ms=250, max_disorder_ms=2_000,
                 closing_gap_ms=60_000)
JOB_FILES = {"blue": "windowed_totals.py", "green": "windowed_totals_green.py"}
ENRICH_FILES = {"blue": "enrich_orders.py", "green": "enrich_orders_green.py"}
ENRICH_PARTITIONS = 4


@dataclass
class SideBySide:
    orders: dict[tuple[int, int], Order]
    raw: list[RawRecord]
    checkpoints: dict[str, Path]
    runs: dict[str, TagRun]
    input_topic: str
    enriched: list[RawRecord]
    enrich_checkpoints: dict[str, Path]


@pytest.fixture(scope="module")
def side_by_side(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> SideBySide:
    tmp = tmp_path_factory.mktemp("blue-green")
    tin, raw = f"orders-{uuid.uuid4().hex[:8]}", f"totals-raw-{uuid.uuid4().hex[:8]}"
    enriched = f"enriched-raw-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {tin: 4, raw: RAW_PARTITIONS, enriched: ENRICH_PARTITIONS})
    write_orders(bootstrap, tin, make_orders(SPEC))
    runs: dict[str, TagRun] = {}
    checkpoints: dict[str, Path] = {}
    for (name, files, out) in (("totals", JOB_FILES, raw), ("enrich", ENRICH_FILES, enriched)):
        for version, job in files.items():
            checkpoints[f"{name}-{version}"] = tmp / f"ck-{name}-{version}"
            args = ["--bootstrap", bootstrap, "--input", tin, "--output", out,
                    "--checkpoint", str(checkpoints[f"{name}-{version}"]), "--available-now",
                    "--max-offsets-per-trigger", "120"]
            runs[f"{name}-{version}"] = TagRun(tag_command(version, JOBS / job, args),
                                               tmp / f"{name}-{version}.log")
    for run in runs.values():  # all at once: side by side
        run.start()
    for name, run in runs.items():
        code = run.wait(600)
        assert code == 0, f"{name} exited {code}:\n{run.tail()}"
        # as users run them: Spark's own connector reads, the tagging sink writes
        assert "Kafka reads served by Spark's Kafka connector" in run.text(), run.tail()
    return SideBySide(
        orders=orders_by_position(read_topic(bootstrap, tin)),
        raw=read_topic(bootstrap, raw),
        checkpoints={v: checkpoints[f"totals-{v}"] for v in JOB_FILES},
        runs={v: runs[f"totals-{v}"] for v in JOB_FILES},
        input_topic=tin,
        enriched=read_topic(bootstrap, enriched),
        enrich_checkpoints={v: checkpoints[f"enrich-{v}"] for v in ENRICH_FILES},
    )


def _expected(s: SideBySide, logs: list[OffsetLog], wms: dict[int, int | None]
              ) -> dict[tuple[str, int], tuple[int, list[Order]]]:
    """(customer, window start) -> (batch that emits it, its orders), by Spark's append rules."""
    batch = assign_batches(logs, s.orders)
    assert set(batch) == set(s.orders), "the job did not read the whole input"
    groups: dict[tuple[str, int], list[Order]] = {}
    for pos, order in s.orders.items():
        start = order.ts - order.ts % WINDOW_MS
        wm = wms[batch[pos]]
        if wm is not None and start + WINDOW_MS <= wm:
            continue  # late for its batch: Spark drops it
        groups.setdefault((order.customer, start), []).append(order)
    out = {}
    for (customer, start), orders in groups.items():
        end = start + WINDOW_MS
        emit = next((log.batch for log in logs if (wms[log.batch] or 0) >= end), None)
        if emit is not None:  # windows the watermark never passed stay open
            out[(customer, start)] = (emit, orders)
    return out


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


@pytest.mark.parametrize("version", ["blue", "green"])
def test_windowed_records_carry_exact_event_time_and_watermark(
    side_by_side: SideBySide, version: str
) -> None:
    s = side_by_side
    logs = offset_logs(s.checkpoints[version], s.input_topic)
    wms = expected_watermarks(logs, s.orders, DELAY_MS)
    # the watermark each batch used, as Spark wrote it, is the one recomputed from the input
    assert {log.batch: (log.meta.batchWatermarkMs or None) for log in logs} == wms
    assert len(logs) >= 4 and committed_batches(s.checkpoints[version]) == {x.batch for x in logs}

    expected = _expected(s, logs, wms)
    assert len(expected) > 20
    data = [r for r in s.raw if r.header(VERSION) == version and r.header(KIND) is None]
    seen: set[tuple[str, int]] = set()
    for rec in data:
        tagged = parse_headers(list(rec.headers))  # the router's own parser accepts it
        value = json.loads(rec.value or b"", parse_float=Decimal)
        start, end = _ms(value["window_start"]), _ms(value["window_end"])
        ident = (value["customer"], start)
        assert ident not in seen, f"duplicate window {ident}"
        seen.add(ident)
        assert ident in expected, f"unexpected window {value}"
        emit, orders = expected[ident]
        assert rec.key == value["customer"].encode()
        assert tagged.event_time == end == start + WINDOW_MS
        assert tagged.batch == emit
        assert tagged.watermark == wms[emit]
        assert tagged.watermark is not None and tagged.watermark >= tagged.event_time
        assert rec.header(BATCH) == str(emit) and rec.header(EVENT_TIME) == str(end)
        assert rec.header(WATERMARK) == str(wms[emit])
        assert rec.partition == partition_for(rec.key, None, RAW_PARTITIONS)
        assert value["orders"] == len(orders)
        exact = sum((Decimal(str(o.amount)) for o in orders), Decimal(0))
        if version == "blue":
            assert Decimal(value["total"]) == exact
            assert set(value) == {"customer", "window_start", "window_end", "orders", "total"}
        else:
            assert value["total"] == int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))
            assert Decimal(value["max_amount"]) == max(Decimal(str(o.amount)) for o in orders)
    assert seen == set(expected)
    assert "event time: end of window column 'window'" in s.runs[version].text()


def test_heartbeats_reach_every_partition_including_idle_ones(side_by_side: SideBySide) -> None:
    s = side_by_side
    for version in JOB_FILES:
        logs = offset_logs(s.checkpoints[version], s.input_topic)
        wms = {log.batch: log.meta.batchWatermarkMs or None for log in logs}
        mine = [r for r in s.raw if r.header(VERSION) == version]
        busy = {r.partition for r in mine if r.header(KIND) is None}
        idle = set(range(RAW_PARTITIONS)) - busy
        assert idle, "the test needs partitions that get no data"
        for p in range(RAW_PARTITIONS):
            in_p = [r for r in mine if r.partition == p]
            beats = [r for r in in_p if r.header(KIND) == "heartbeat"]
            assert [int(b.header(BATCH) or -1) for b in beats] == sorted(wms), (version, p)
            for beat in beats:
                tagged = parse_headers(list(beat.headers))
                assert beat.value == b"" and beat.key is None
                assert tagged.watermark == wms[tagged.batch or 0]
                assert tagged.event_time is None
            # every data record of batch n comes after heartbeat n-1 and before heartbeat n
            last_batch = -1
            for r in in_p:
                n = int(r.header(BATCH) or -1)
                if r.header(KIND) == "heartbeat":
                    assert n == last_batch + 1
                    last_batch = n
                else:
                    assert n == last_batch + 1, f"{version} p{p}: data of batch {n} misplaced"
        reports = s.runs[version].reports()
        assert [r.batch for r in reports] == sorted(wms)
        assert all(r.heartbeats == RAW_PARTITIONS for r in reports)


def test_blue_and_green_side_by_side_same_windows_same_partitions(
    side_by_side: SideBySide,
) -> None:
    s = side_by_side
    by_version: dict[str, dict[tuple[str, str], RawRecord]] = {"blue": {}, "green": {}}
    for r in s.raw:
        if r.header(KIND) is None:
            v = json.loads(r.value or b"")
            by_version[r.header(VERSION) or "?"][(v["customer"], v["window_start"])] = r
    blue, green = by_version["blue"], by_version["green"]
    assert blue and set(blue) == set(green)  # same input, same windows
    for ident, b in blue.items():
        g = green[ident]
        # same key -> same raw partition, same event time: the router's assumptions
        assert (b.key, b.partition, b.header(EVENT_TIME)) == (g.key, g.partition,
                                                              g.header(EVENT_TIME))
        assert b.value != g.value  # green's logic really differs
        assert "max_amount" in json.loads(g.value or b"")


EUR_RATES = {"DE": Decimal("1.00"), "FR": Decimal("1.00"), "US": Decimal("0.92"),
             "GB": Decimal("1.17"), "JP": Decimal("0.0061")}


@pytest.mark.parametrize("version", ["blue", "green"])
def test_enrichment_records_carry_the_order_time_and_their_batch_watermark(
    side_by_side: SideBySide, version: str
) -> None:
    s = side_by_side
    logs = offset_logs(s.enrich_checkpoints[version], s.input_topic)
    wms = expected_watermarks(logs, s.orders, DELAY_MS)
    assert {log.batch: (log.meta.batchWatermarkMs or None) for log in logs} == wms
    assert len(logs) >= 4 and any(wms.values())
    batch = assign_batches(logs, s.orders)
    by_id = {o.order_id: (pos, o) for pos, o in s.orders.items()}
    data = [r for r in s.enriched if r.header(VERSION) == version and r.header(KIND) is None]
    got = {}
    for rec in data:
        tagged = parse_headers(list(rec.headers))
        value = json.loads(rec.value or b"", parse_float=Decimal)
        assert value["order_id"] not in got, "duplicate"
        got[value["order_id"]] = value
        pos, order = by_id[value["order_id"]]
        amount = Decimal(str(order.amount))
        assert tagged.event_time == order.ts == value["ts"]
        assert tagged.batch == batch[pos]
        assert tagged.watermark == wms[batch[pos]]
        assert rec.key == order.customer.encode()
        assert rec.partition == partition_for(rec.key, None, ENRICH_PARTITIONS)
        assert Decimal(value["amount"]) == amount
        rate = EUR_RATES[order.country]
        assert Decimal(value["amount_eur"]) == (amount * rate).quantize(Decimal("0.01"),
                                                                         ROUND_HALF_UP)
        high = Decimal(100 if version == "blue" else 150)
        assert value["tier"] == ("high" if amount >= high else "normal")
        if version == "green":
            assert value["amount_cents"] == int(amount * 100)
        else:
            assert "amount_cents" not in value
    assert set(got) == {o.order_id for o in s.orders.values() if o.amount >= 5}
    beats = [r for r in s.enriched if r.header(VERSION) == version and r.header(KIND)]
    assert sorted((r.partition, int(r.header(BATCH) or -1)) for r in beats) == sorted(
        (p, log.batch) for p in range(ENRICH_PARTITIONS) for log in logs)
