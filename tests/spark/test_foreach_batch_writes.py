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
    CONNECT_LOCAL_ENV,
    JOBS,
    TEST_JOBS,
    TagRun,
    assign_batches,
    check_heartbeats,
    committed_batches,
    expected_watermarks,
    offset_logs,
    orders_by_position,
    run_tag,
    tag_command,
    wait_for,
)

from cutover.cli.orders import EventSpec, Order, make_orders, write_orders
from cutover.headers import KIND, VERSION, parse_headers
from spark_tagger.partitioner import partition_for
from spark_tagger.spark_version import has_python_data_sources
from testground.brokers import create_topics
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


@pytest.mark.slow
@pytest.mark.parametrize("remote", [
    pytest.param(None, id="classic"),
    pytest.param("local[2]", id="spark-connect", marks=pytest.mark.skipif(
        not has_python_data_sources(),
        reason="the tagger serves Spark Connect jobs from Spark 4 on; on 3.5 it refuses them "
               "(tests/spark/test_launcher_errors.py)"))])
def test_kill_9_inside_a_foreach_batch_function_then_restart_gives_identical_duplicates(
    bootstrap: str, tmp_path: Path, remote: str | None
) -> None:
    """kill -9 of the whole job after the function's Kafka write of a batch and before its
    heartbeats (the function is still running); the restart replays that batch. On Spark
    Connect the function runs in the server's Python, in the job's process group here."""
    from confluent_kafka import Consumer, TopicPartition

    tin, tout = f"fbkill-in-{uuid.uuid4().hex[:8]}", f"fbkill-out-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {tin: 2, tout: 3})
    write_orders(bootstrap, tin, make_orders(EventSpec(seed=29, count=240, customers=6)))
    ck = tmp_path / "ck"
    args = ["--bootstrap", bootstrap, "--input", tin, "--output", tout, "--checkpoint", str(ck),
            *(["--remote", remote] if remote else [])]
    env = CONNECT_LOCAL_ENV if remote else None
    job = TEST_JOBS / "slow_audit.py"
    first = TagRun(tag_command("blue", job, args), tmp_path / "first.log", env or {}).start()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "fb-kill-watch",
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(tout, p, 0) for p in range(3)])
    data: set[int] = set()
    beats: set[int] = set()
    try:

        def mid_batch() -> int | None:
            assert first.proc.poll() is None, f"the job ended early:\n{first.tail()}"
            for msg in consumer.consume(500, 0.1):
                if msg.error() is None:
                    tagged = parse_headers(msg.headers())
                    (beats if tagged.kind == "heartbeat" else data).add(tagged.batch or 0)
            open_ = sorted(b for b in data - beats if b >= 1)
            return open_[0] if open_ else None

        killed_in = wait_for(mid_batch, 300, "a batch written but not yet heartbeat",
                             interval=0.05)
        first.kill()
    finally:
        if first.proc.poll() is None:
            first.kill()
        consumer.close()
    assert killed_in not in committed_batches(ck)
    before = read_topic(bootstrap, tout)
    second = run_tag(tag_command("blue", job, [*args, "--available-now"]),
                     tmp_path / "second.log", timeout=400, env=env)
    after = read_topic(bootstrap, tout)
    orders = orders_by_position(read_topic(bootstrap, tin))
    logs = offset_logs(ck, tin)
    batch_of = assign_batches(logs, orders)
    assert set(batch_of) == set(orders), "the restarted job did not read the whole input"
    wms = {log.batch: log.meta.batchWatermarkMs or None for log in logs}
    position = {o.order_id: pos for pos, o in orders.items()}
    copies: dict[str, list[RawRecord]] = defaultdict(list)
    for rec in after:
        tagged = parse_headers(list(rec.headers))
        if rec.header(KIND):
            continue
        pos = position[json.loads(rec.value or b"")["order_id"]]
        assert tagged.event_time == orders[pos].ts
        assert tagged.batch == batch_of[pos] and tagged.watermark == wms[batch_of[pos]]
        copies[orders[pos].order_id].append(rec)
    assert set(copies) == {o.order_id for o in orders.values()}, "records lost or invented"
    duplicated = {oid: recs for oid, recs in copies.items() if len(recs) > 1}
    assert duplicated, "the kill did not interrupt a batch that had written records"
    for oid, recs in duplicated.items():
        assert len(recs) == 2 and len({r.content for r in recs}) == 1, f"{oid}: differ"
        assert recs[0].header("bg.batch") == str(killed_in)
    assert len(after) > len(before)
    assert second.reports()[0].batch == killed_in  # the restart replays the killed batch first
    check_heartbeats(after, committed_batches(ck), 3)
