"""The issue's reproduction: one job, two Kafka sinks and a ``foreachBatch`` audit writer that
uses the batch Kafka writer with its default save mode, under ``cutover tag`` with Spark's own
Kafka connector on the classpath.

Every query is tagged with its own batches and watermarks, recomputed from the input and that
query's checkpoint; the audit query's heartbeats reach every partition of the topic its function
wrote, after each batch; a replayed audit batch (the crash between its writes and Spark's
commit) writes the same bytes to the same partitions.
"""

from __future__ import annotations

import json
import uuid
from collections import defaultdict
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path

import pytest
from spark_test_support import (
    JOBS,
    TagRun,
    assign_batches,
    committed_batches,
    expected_watermarks,
    offset_logs,
    orders_by_position,
    run_tag,
    tag_command,
)

from cutover.broker import create_topics
from cutover.cli.orders import EventSpec, Order, make_orders, write_orders
from cutover.headers import KIND, VERSION, parse_headers
from spark_tagger.partitioner import partition_for
from tests.topics import RawRecord, read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]

DELAY_MS = 5_000
SPEC = EventSpec(seed=23, count=300, customers=5, step_ms=250, max_disorder_ms=2_000,
                 closing_gap_ms=60_000)
PARTITIONS = {"enriched": 3, "totals": 4, "audit": 5}


@dataclass
class AuditRun:
    orders: dict[tuple[int, int], Order]
    input_topic: str
    topics: dict[str, str]
    checkpoint: Path
    run: TagRun
    args: list[str]
    out: dict[str, list[RawRecord]]


@pytest.fixture(scope="module")
def audit_run(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> AuditRun:
    tmp = tmp_path_factory.mktemp("audit")
    tin = f"audit-in-{uuid.uuid4().hex[:8]}"
    topics = {q: f"{q}-{uuid.uuid4().hex[:8]}" for q in PARTITIONS}
    create_topics(bootstrap, {tin: 4, **{topics[q]: n for q, n in PARTITIONS.items()}})
    write_orders(bootstrap, tin, make_orders(SPEC))
    checkpoint = tmp / "ck"
    args = ["--bootstrap", bootstrap, "--input", tin, "--enriched", topics["enriched"],
            "--totals", topics["totals"], "--audit", topics["audit"],
            "--checkpoint", str(checkpoint), "--available-now", "--max-offsets-per-trigger", "100"]
    run = run_tag(tag_command("blue", JOBS / "orders_with_audit.py", args), tmp / "run.log",
                  timeout=600)
    assert "Kafka reads served by Spark's Kafka connector" in run.text(), run.tail()
    return AuditRun(orders=orders_by_position(read_topic(bootstrap, tin)), input_topic=tin,
                    topics=topics, checkpoint=checkpoint, run=run, args=args,
                    out={q: read_topic(bootstrap, t) for q, t in topics.items()})


def _data(records: list[RawRecord]) -> list[RawRecord]:
    return [r for r in records if r.header(KIND) is None]


def test_foreach_batch_writes_are_tagged_with_their_query_batch_and_watermark(
    audit_run: AuditRun,
) -> None:
    s = audit_run
    ck = s.checkpoint / "audit"
    logs = offset_logs(ck, s.input_topic)
    wms = expected_watermarks(logs, s.orders, DELAY_MS)
    assert {log.batch: (log.meta.batchWatermarkMs or None) for log in logs} == wms
    assert len(logs) >= 3 and committed_batches(ck) == {log.batch for log in logs}
    batch_of = assign_batches(logs, s.orders)
    by_id = {o.order_id: pos for pos, o in s.orders.items()}
    seen: set[str] = set()
    for rec in _data(s.out["audit"]):
        tagged = parse_headers(list(rec.headers))  # the router's own parser accepts it
        value = json.loads(rec.value or b"", parse_float=Decimal)
        pos = by_id[value["order_id"]]
        order = s.orders[pos]
        assert value["order_id"] not in seen, "duplicate"
        seen.add(value["order_id"])
        assert tagged.version == "blue"
        assert tagged.event_time == order.ts  # the batch DataFrame's watermarked column
        assert tagged.batch == batch_of[pos]
        assert tagged.watermark == wms[batch_of[pos]]
        assert rec.key == order.order_id.encode()
        assert rec.partition == partition_for(rec.key, None, PARTITIONS["audit"])
    assert seen == {o.order_id for o in s.orders.values()}, "audit records lost"
    # heartbeats: after every batch, on every partition, with that batch's watermark, after
    # the batch's data on that partition
    for p in range(PARTITIONS["audit"]):
        in_p = [r for r in s.out["audit"] if r.partition == p]
        beats = [parse_headers(list(r.headers)) for r in in_p if r.header(KIND)]
        assert [(b.batch, b.watermark) for b in beats] == sorted(wms.items()), p
        last = -1
        for r in in_p:
            n = int(r.header("bg.batch") or -1)
            if r.header(KIND):
                last = n
            else:
                assert n == last + 1, f"audit p{p}: data of batch {n} after its heartbeat"
    reports = [r for r in s.run.reports() if r.query == "audit"]
    assert [r.batch for r in reports] == sorted(wms)
    assert all(r.heartbeats == PARTITIONS["audit"] for r in reports)
    assert sum(r.records for r in reports) == len(s.orders)


def test_the_job_s_plain_sinks_are_tagged_each_with_its_own_watermark(
    audit_run: AuditRun,
) -> None:
    s = audit_run
    for query in ("enriched", "totals"):
        logs = offset_logs(s.checkpoint / query, s.input_topic)
        wms = expected_watermarks(logs, s.orders, DELAY_MS)
        assert {log.batch: (log.meta.batchWatermarkMs or None) for log in logs} == wms
        data = _data(s.out[query])
        assert data and all(r.header(VERSION) == "blue" for r in data)
        for rec in data:
            tagged = parse_headers(list(rec.headers))
            assert tagged.watermark == wms[tagged.batch or 0]
            value = json.loads(rec.value or b"")
            if query == "totals":
                assert str(tagged.event_time) == str(
                    int(Decimal(_epoch_ms(value["window_end"]))))
            else:
                assert tagged.event_time == value["ts"]
        beats = sorted((r.partition, int(r.header("bg.batch") or -1))
                       for r in s.out[query] if r.header(KIND))
        assert beats == sorted((p, b) for p in range(PARTITIONS[query]) for b in wms), query
    enriched = {json.loads(r.value or b"")["order_id"] for r in _data(s.out["enriched"])}
    assert enriched == {o.order_id for o in s.orders.values() if o.amount >= 5}


def _epoch_ms(iso: str) -> int:
    from datetime import datetime

    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def test_a_replayed_foreach_batch_writes_the_same_bytes(
    audit_run: AuditRun, bootstrap: str, tmp_path: Path
) -> None:
    """The crash between the audit function's writes and Spark's commit: the batch's commit
    file is gone, so the restarted job runs that batch again from its offsets file."""
    s = audit_run
    ck = s.checkpoint / "audit"
    last = max(committed_batches(ck))
    for name in (str(last), f".{last}.crc"):
        (ck / "commits" / name).unlink(missing_ok=True)
    run_tag(tag_command("blue", JOBS / "orders_with_audit.py", s.args), tmp_path / "replay.log",
            timeout=600)
    after = read_topic(bootstrap, s.topics["audit"])
    assert last in committed_batches(ck)
    copies: dict[tuple[object, ...], int] = defaultdict(int)
    for rec in after:
        copies[rec.content] += 1
    first: dict[tuple[object, ...], int] = defaultdict(int)
    for rec in s.out["audit"]:
        first[rec.content] += 1
    assert len(after) > len(s.out["audit"]), "the replay wrote nothing"
    replayed = [r for r in after[::-1] if copies[r.content] > first[r.content]]
    assert replayed and all(first[r.content] == 1 for r in replayed), \
        "the replay wrote records the first run did not"
    assert {r.header("bg.batch") for r in replayed} == {str(last)}
    wrote_again = sum(copies.values()) - sum(first.values())
    assert wrote_again == len({r.content for r in replayed}) == sum(
        1 for r in s.out["audit"] if r.header("bg.batch") == str(last))
