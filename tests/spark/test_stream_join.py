"""A stream-stream join under ``cutover tag``: which event time and which watermark.

The paid-orders example joins orders with payments, each side with its own watermark delay.
Its output keeps both time columns, so the tagger refuses to guess (the in-process test of
``attach_event_time`` holds that sentence) and the operator passes
``--event-time 'greatest(order_time, paid_time)'``: the joined record's later time, which is the
one Spark's global watermark bounds. ``bg.watermark`` is Spark's global watermark, the minimum
of the two sides' (``multipleWatermarkPolicy=min``), as the checkpoint records it per batch;
this test recomputes it from the two inputs.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from spark_test_support import JOBS, committed_batches, run_tag, tag_command

from cutover.cli.orders import EventSpec, Order, make_orders, write_orders
from cutover.headers import KIND, parse_headers
from spark_tagger.checkpoint import parse_offset_log
from spark_tagger.partitioner import partition_for
from testground.brokers import create_topics
from tests.topics import read_topic

# slow: make test-all runs it; the default suite keeps CI's 25-minute budget
pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

ORDER_DELAY_MS, PAYMENT_DELAY_MS, PAY_WITHIN_MS = 10_000, 15_000, 30_000
OUT_PARTITIONS = 3


def _payments(orders: list[Order]) -> dict[str, int]:
    """order id -> payment time: three orders in four are paid, one in ten of those too late."""
    paid = {}
    for i, o in enumerate(orders):
        if i % 4 == 0:
            continue
        paid[o.order_id] = o.ts + (PAY_WITHIN_MS + 10_000 if i % 10 == 3 else (i * 7919) % 20_000)
    return paid


def _write_payments(bootstrap: str, topic: str, paid: dict[str, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for oid, ts in sorted(paid.items(), key=lambda x: x[1]):
        key = oid.encode()
        producer.produce(topic, key=key, value=json.dumps({"order_id": oid, "paid_ts": ts}),
                         partition=partition_for(key, None, 2))
    assert producer.flush(30) == 0


def test_join_records_carry_the_later_time_and_spark_s_global_watermark(
    bootstrap: str, tmp_path: Path
) -> None:
    n = uuid.uuid4().hex[:8]
    t_orders, t_pay, out = f"join-o-{n}", f"join-p-{n}", f"join-out-{n}"
    create_topics(bootstrap, {t_orders: 2, t_pay: 2, out: OUT_PARTITIONS})
    orders = make_orders(EventSpec(seed=51, count=200, customers=4, step_ms=250,
                                   max_disorder_ms=1_000))
    write_orders(bootstrap, t_orders, orders)
    paid = _payments(orders)
    _write_payments(bootstrap, t_pay, paid)
    ck = tmp_path / "ck"
    run = run_tag(tag_command("blue", JOBS / "paid_orders.py", [
        "--bootstrap", bootstrap, "--orders", t_orders, "--payments", t_pay, "--output", out,
        "--checkpoint", str(ck), "--available-now", "--max-offsets-per-trigger", "60"],
        flags=["--event-time", "greatest(order_time, paid_time)"]), tmp_path / "job.log",
        timeout=600)
    assert "event time: --event-time greatest(order_time, paid_time)" in run.text()

    # Spark's global watermark per batch, recomputed from what each side read
    by_pos = {(r.topic, r.partition, r.offset): json.loads(r.value or b"")
              for t in (t_orders, t_pay) for r in read_topic(bootstrap, t)}
    time_of = {k: (v["ts"] if k[0] == t_orders else v["paid_ts"]) for k, v in by_pos.items()}
    delay = {t_orders: ORDER_DELAY_MS, t_pay: PAYMENT_DELAY_MS}
    files = sorted((int(f.name), f.read_text()) for f in (ck / "offsets").iterdir()
                   if f.name.isdigit())
    assert len(files) >= 3 and committed_batches(ck) == {b for b, _ in files}
    spark_wm: dict[int, int | None] = {}
    expected_wm: dict[int, int | None] = {}
    wm, prev, max_seen = 0, {}, {}  # type: ignore[var-annotated]
    for batch, text in files:
        spark_wm[batch] = parse_offset_log(text).batchWatermarkMs or None
        expected_wm[batch] = wm or None
        ends = {(t, int(p)): o for line in text.splitlines()[2:]
                for t, parts in json.loads(line).items() for p, o in parts.items()}
        for (topic, p, off), ts in time_of.items():
            if prev.get((topic, p), 0) <= off < ends.get((topic, p), 0):
                max_seen[topic] = max(max_seen.get(topic, ts), ts)
        prev = ends
        if max_seen:
            wm = max(wm, min(max_seen[t] - delay[t] for t in max_seen))
    assert spark_wm == expected_wm
    assert len({w for w in spark_wm.values() if w}) >= 2, "the watermark never moved"

    by_id = {o.order_id: o for o in orders}
    expected = {oid for oid, ts in paid.items() if by_id[oid].ts <= ts <= by_id[oid].ts
                + PAY_WITHIN_MS}
    records = read_topic(bootstrap, out)
    got = set()
    for r in records:
        tagged = parse_headers(list(r.headers))
        assert tagged.version == "blue"
        assert tagged.watermark == spark_wm[tagged.batch or 0]
        if r.header(KIND):
            continue
        v = json.loads(r.value or b"")
        assert v["order_id"] not in got, "duplicate"
        got.add(v["order_id"])
        assert v["ts"] == by_id[v["order_id"]].ts and v["paid_ts"] == paid[v["order_id"]]
        assert tagged.event_time == max(v["ts"], v["paid_ts"])
        assert r.partition == partition_for(r.key, None, OUT_PARTITIONS)
    assert got == expected
    beats = sorted((r.partition, int(r.header("bg.batch") or -1)) for r in records
                   if r.header(KIND))
    assert beats == sorted((p, b) for p in range(OUT_PARTITIONS) for b in spark_wm)
