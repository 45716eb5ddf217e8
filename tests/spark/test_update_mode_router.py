"""Update output mode through the router: which dedup identity keeps every update.

The running-totals example (a windowed aggregation in update mode) runs under ``cutover tag``;
every record on the raw topic is recomputed from the input and the checkpoint (each batch
re-emits every window it changed, with the counts so far, event time = the window's end). Then
one router worker routes the raw topic twice, as two routes (the second reads a byte-identical
copy, since a raw topic feeds one route): dedup identity ``record`` forwards every update,
``key_event_time`` forwards each window's first emission only and drops its later updates as
duplicates, which is what the tagger's start-up warning says.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from spark_test_support import (
    JOBS,
    assign_batches,
    committed_batches,
    expected_watermarks,
    offset_logs,
    orders_by_position,
    run_tag,
    tag_command,
)

from cutover.cli.orders import EventSpec, make_orders, write_orders
from cutover.headers import KIND, parse_headers
from router.base.kafka_io import base_conf, read_to_end
from testground.brokers import create_topics, end_offsets
from tests.children import RouterChild
from tests.conformance.runner import run_cli
from tests.topics import RawRecord, read_topic

# slow: make test-all runs it; the default suite keeps CI's 25-minute budget
pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.slow]

WINDOW_MS = 10_000
DELAY_MS = 5_000
RAW = 4
SPEC = EventSpec(seed=41, count=240, customers=3, step_ms=250, max_disorder_ms=2_000,
                 closing_gap_ms=60_000)
Update = tuple[str, int, int, Decimal, int]  # customer, window start, orders, total, batch


def _ms(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def _copy(bootstrap: str, records: list[RawRecord], topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for r in records:
        producer.produce(topic, key=r.key, value=r.value, partition=r.partition,
                         headers=list(r.headers) or None)
    assert producer.flush(30) == 0


def test_update_mode_keeps_every_update_with_record_identity_only(
    bootstrap: str, tmp_path: Path
) -> None:
    n = f"upd{uuid.uuid4().hex[:8]}"
    tin, raw, raw_copy = f"{n}.in", f"{n}.raw", f"{n}.raw2"
    outs = {"record": f"{n}.out", "key_event_time": f"{n}.out2"}
    create_topics(bootstrap, {tin: 2, raw: RAW, raw_copy: RAW, **{o: RAW for o in outs.values()},
                              f"{n}.dlq": RAW, f"{n}.dlq2": RAW, f"{n}.control": 1,
                              f"{n}.status": 1}, compacted=[f"{n}.control"])
    write_orders(bootstrap, tin, make_orders(SPEC))
    ck = tmp_path / "ck"
    run = run_tag(tag_command("blue", JOBS / "running_totals.py", [
        "--bootstrap", bootstrap, "--input", tin, "--output", raw, "--checkpoint", str(ck),
        "--available-now", "--max-offsets-per-trigger", "40"]), tmp_path / "job.log", timeout=600)
    assert ("cutover tag: warning: the query writing to topic "
            f"{raw!r} runs in update output mode") in run.text()
    assert "not 'key_event_time', which keeps only each window's first emission" in run.text()

    # the raw topic, recomputed: each batch emits every window it changed, counts so far
    orders = orders_by_position(read_topic(bootstrap, tin))
    logs = offset_logs(ck, tin)
    wms = expected_watermarks(logs, orders, DELAY_MS)
    assert {log.batch: (log.meta.batchWatermarkMs or None) for log in logs} == wms
    assert committed_batches(ck) == {log.batch for log in logs}
    batch_of = assign_batches(logs, orders)
    expected: set[Update] = set()
    state: dict[tuple[str, int], tuple[int, Decimal]] = {}
    for log in logs:
        touched = set()
        for pos, b in batch_of.items():
            o = orders[pos]
            start = o.ts - o.ts % WINDOW_MS
            if b != log.batch or (wms[b] is not None and start + WINDOW_MS <= (wms[b] or 0)):
                continue
            count, total = state.get((o.customer, start), (0, Decimal(0)))
            state[(o.customer, start)] = (count + 1, total + Decimal(str(o.amount)))
            touched.add((o.customer, start))
        expected |= {(c, s, *state[(c, s)], log.batch) for c, s in touched}
    raw_records = read_topic(bootstrap, raw)
    data = [r for r in raw_records if r.header(KIND) is None]
    got: set[Update] = set()
    for r in data:
        tagged = parse_headers(list(r.headers))
        v = json.loads(r.value or b"", parse_float=Decimal)
        start = _ms(v["window_start"])
        assert tagged.event_time == start + WINDOW_MS  # every update: the window's end
        assert tagged.watermark == wms[tagged.batch or 0]
        got.add((v["customer"], start, v["orders"], Decimal(v["total"]), tagged.batch or 0))
    assert got == expected and len(data) == len(expected)
    per_window: dict[tuple[str, int], int] = defaultdict(int)
    for c, s, *_ in expected:
        per_window[(c, s)] += 1
    assert max(per_window.values()) >= 2, "no window was re-emitted: update mode not exercised"
    assert sum(per_window.values()) > len(per_window)

    # the router, both identities
    _copy(bootstrap, raw_records, raw_copy)
    config = tmp_path / "router.yaml"
    config.write_text(yaml.safe_dump({
        "bootstrap": bootstrap, "control_topic": f"{n}.control", "status_topic": f"{n}.status",
        "group_id": f"g-{n}", "state_dir": str(tmp_path / "state"), "http_port": None,
        "status_interval_s": 0.5,
        "kafka": {"session.timeout.ms": 6000, "heartbeat.interval.ms": 500},
        "routes": [
            {"name": f"{n}-record", "inputs": [raw], "output": outs["record"],
             "dead_letter": f"{n}.dlq", "dedup": {"identity": "record"}},
            {"name": f"{n}-ket", "inputs": [raw_copy], "output": outs["key_event_time"],
             "dead_letter": f"{n}.dlq2", "dedup": {"identity": "key_event_time"}},
        ],
    }))
    for route in (f"{n}-record", f"{n}-ket"):
        rc, out = run_cli(config, "plan", "init", "--route", route, "--primary", "blue")
        assert rc == 0, out
    router = RouterChild(config, tmp_path / "router.log")
    try:
        router.wait_started(90)
        firsts = {(c, s) for c, s in per_window}
        want = {"record": len(expected), "key_event_time": len(firsts)}
        deadline = time.monotonic() + 120
        # counted as a read_committed consumer sees them (end offsets count commit markers)
        while any(sum(1 for _ in read_to_end(base_conf(bootstrap), outs[k])) < want[k]
                  for k in outs):
            assert time.monotonic() < deadline, f"router output short:\n{router.tail()}"
            router.assert_alive()
            time.sleep(0.5)
        time.sleep(2.0)  # anything extra would show by now
    finally:
        router.stop()
    forwarded = {k: [r for r in read_topic(bootstrap, t) if r.header(KIND) is None]
                 for k, t in outs.items()}
    assert sum(end_offsets(bootstrap, f"{n}.dlq").values()) == 0

    def updates(records: list[RawRecord]) -> list[Update]:
        out = []
        for r in records:
            v = json.loads(r.value or b"", parse_float=Decimal)
            out.append((v["customer"], _ms(v["window_start"]), v["orders"],
                        Decimal(v["total"]), int(r.header("bg.batch") or -1)))
        return out

    assert sorted(updates(forwarded["record"])) == sorted(expected)  # every update, once
    kept = updates(forwarded["key_event_time"])
    assert len(kept) == len(firsts)  # one per window: its later updates were dropped
    first_batch = {w: min(b for c, s, _, _, b in expected if (c, s) == w) for w in firsts}
    assert {(c, s): b for c, s, _, _, b in kept} == first_batch  # the first emission won
