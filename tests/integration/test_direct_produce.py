"""Forwards produced straight into librdkafka (router/native/_produce.h) on the producer handle
librdkafka's on_new gave the plugin, from the records its on_consume kept
(router/native/_plugin.h), on the broker: what a consumer of the output reads must be what the
raw record had, byte for byte (key, value, every header in order, None and empty values kept
apart), plus its ``bg.src``, in the raw partition's order, each once; and the direct path must
be the one that produced most of them, from records the data consumer's tap kept.

The records carry the shapes a user's job gives a forward: no key, no value, an empty value,
job headers before the tagger's (with None, empty and binary values, a repeated name), large
values, and the other version's records in between (suppressed).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from cutover.headers import SRC, VERSION, TaggedRecord, heartbeat_headers, parse_headers
from cutover.plan import CutoverPlan, Segment
from cutover.settings import RouteSettings, parse_settings
from router.dedup.store import DedupStore
from router.durability.output_writer import OutputWriter
from router.durability.partition import Owned, RouteRuntime
from router.durability.resume import Durability
from router.native import compiled
from router.rule.decision import PartitionRouter
from router.rule.identity import record_identity
from router.worker.datapath import DataPath
from testground.brokers import BrokerUnderTest, create_topics
from tests.topics import RawRecord, read_topic

if TYPE_CHECKING:
    from router.native._fastpath import Tap

pytestmark = pytest.mark.broker

PARTITIONS = 2
RECORDS = 3000

Headers = list[tuple[str, bytes | None]]


def _record(rng: random.Random, i: int, t: int) -> tuple[bytes | None, bytes | None, Headers]:
    version = "blue" if i % 3 else "green"
    job: Headers = [(rng.choice(["trace", "x-id", "span", "trace"]),
                     rng.choice([b"abc", b"", None, bytes(range(256)), b"\x00\xff"]))
                    for _ in range(rng.randrange(4))]
    tagged = list(TaggedRecord(version=version, event_time=t, watermark=t - 1000,
                               batch=i // 100).to_headers())
    key = None if i % 7 == 0 else b"k%d" % i
    value: bytes | None = (None if i % 11 == 0 else b"" if i % 13 == 0
                           else b"v%d-" % i + rng.randbytes(rng.choice([0, 10, 3000])))
    return key, value, job + tagged


def test_direct_forwards_are_the_raw_records(broker: BrokerUnderTest, tmp_path: Path) -> None:
    if broker.kind == "tansu":
        pytest.skip("forwards are produced directly into transactions; they are off on Tansu")
    assert compiled.enabled(), compiled.path_name()
    assert compiled.PLUGIN is None, compiled.PLUGIN  # on with this client
    assert compiled._fastpath is not None
    bootstrap = broker.bootstrap
    n = uuid.uuid4().hex[:8]
    raw, out, control, status = (f"dp-{x}-{n}" for x in ("raw", "out", "ctl", "st"))
    create_topics(bootstrap, {raw: PARTITIONS, out: PARTITIONS, f"{out}.dlq": PARTITIONS,
                              control: 1, status: 1})
    rng = random.Random(20261126)
    base = int(time.time() * 1000) - 60_000
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        key, value, headers = _record(rng, i, base + i)
        p.produce(raw, value, key, partition=i % PARTITIONS, headers=headers)
        if i % 250 == 249:  # a heartbeat ends a compiled run: the next starts held by Python
            for q in range(PARTITIONS):
                p.produce(raw, None, None, partition=q,
                          headers=heartbeat_headers("green", base + i - 1000, i // 100))
    plan = CutoverPlan(route="r", epoch=1, segments=(Segment(from_event_time=None,
                                                             primary="blue"),))
    p.produce(control, plan.to_json(), b"r")
    assert p.flush(30) == 0
    sent = {(r.partition, r.offset): r for r in read_topic(bootstrap, raw)}  # as written
    assert len(sent) == RECORDS + RECORDS // 250 * PARTITIONS
    for v in ("blue", "green"):  # versions seen: the first record of each is not decided
        parse_headers(TaggedRecord(version=v, event_time=1, watermark=0,  # by the general path
                                   batch=0).to_headers())

    settings = parse_settings({
        "bootstrap": bootstrap, "control_topic": control, "status_topic": status,
        "group_id": f"dp-{n}", "state_dir": str(tmp_path / "state"), "http_port": None,
        "transactions": "on", "kafka": {"session.timeout.ms": 6000},
        "routes": [{"name": "r", "inputs": [raw], "output": out}]})
    before = compiled._fastpath.produced_directly()
    engine = DataPath(settings, "dp")
    batches = 0
    handle = engine._handle

    def counted(msgs: list[Message]) -> None:
        nonlocal batches
        batches += 1
        handle(msgs)

    engine._handle = counted
    th = threading.Thread(target=engine.run, daemon=True)
    th.start()
    forwards = sum(1 for i in range(RECORDS) if i % 3)
    deadline = time.monotonic() + 90
    try:
        while sum(o.router.counters.forwarded for o in list(engine.owned.values())) < forwards:
            assert time.monotonic() < deadline, "the router did not forward every record"
            assert th.is_alive(), "the router stopped"
            time.sleep(0.05)
        time.sleep(1.0)  # the last batch's commits
    finally:
        engine.stop()
        th.join(30)
    direct = compiled._fastpath.produced_directly() - before
    tap = engine._consumer.tap
    assert tap is not None
    read = tap.counts["read"]  # records the runs found kept by on_consume

    got: list[RawRecord] = read_topic(bootstrap, out)
    assert len(got) == forwards
    last = [-1] * PARTITIONS
    for rec in got:
        src_topic, src_p, src_off = (rec.header(SRC) or "::").rsplit(":", 2)
        assert (src_topic, int(src_p)) == (raw, rec.partition)
        off = int(src_off)
        assert off > last[rec.partition], "the output is out of the raw partition's order"
        last[rec.partition] = off
        was = sent[(rec.partition, off)]
        assert was.header(VERSION) == "blue"
        assert (rec.key, rec.value) == (was.key, was.value)
        assert rec.headers == (*was.headers, (SRC, f"{raw}:{rec.partition}:{off}".encode()))
    # Each output partition's last forward of a batch goes through Producer.produce (its
    # delivery report is read), and so does the first of each compiled run (held over from
    # the run before: a run ends at a heartbeat and with its batch); every other forward was
    # produced directly.
    runs = (RECORDS // 250 + batches) * PARTITIONS
    assert forwards - 2 * runs <= direct < forwards, (direct, forwards, batches)
    # every record but the first of each run was read from what on_consume kept
    assert RECORDS - 2 * runs <= read <= RECORDS, (read, RECORDS, batches)


def test_a_refused_direct_produce_queues_the_forwards_unchanged(broker: BrokerUnderTest,
                                                                tmp_path: Path) -> None:
    """A produce librdkafka refuses (here: no transaction begun) gives the record's headers
    back, bg.src already on them; the forward goes through Producer.produce, which meets the
    error again, and the stream queues it and the rest: each with its headers once and one
    bg.src, in order."""
    if broker.kind == "tansu":
        pytest.skip("forwards are produced directly into transactions; they are off on Tansu")
    assert compiled._fastpath is not None and compiled.PLUGIN is None
    bootstrap = broker.bootstrap
    n = uuid.uuid4().hex[:8]
    raw, out = f"dpr-raw-{n}", f"dpr-out-{n}"
    create_topics(bootstrap, {raw: 1, out: 1})
    base = int(time.time() * 1000) - 60_000
    p = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    written = [[("trace", b"t%d" % i), *TaggedRecord(
        version="blue", event_time=base + i, watermark=base - 1000, batch=0).to_headers()]
        for i in range(6)]
    for i in range(6):
        p.produce(raw, b"v%d" % i, b"k%d" % i, partition=0, headers=written[i])
    assert p.flush(30) == 0
    consumed, tap = read_messages(bootstrap, raw, 6)
    parse_headers(TaggedRecord(version="blue", event_time=1, watermark=0, batch=0).to_headers())

    rs = RouteSettings.model_validate({"name": "r", "inputs": [raw], "output": out})
    store = DedupStore(tmp_path / "store")
    router = PartitionRouter(0, identity=record_identity, store=store,
                             retention_ms=rs.dedup.retention_ms)
    router.apply_plan(CutoverPlan(route="r", epoch=1,
                                  segments=(Segment(from_event_time=None, primary="blue"),)))
    owned = Owned(RouteRuntime(rs, record_identity, 1), 0, router, store,
                  Durability(next_offsets={raw: 0}, out_pos=0, known_end=0, rebuild_from=0))
    producer = compiled.tapped_producer({"bootstrap.servers": bootstrap,
                                         "transactional.id": f"dpr-{n}"})
    producer.init_transactions(30)   # and no transaction begun: every produce is refused
    probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"dpr-probe-{n}"})
    writer = OutputWriter({"bootstrap.servers": bootstrap}, producer, probe)
    try:
        stream = writer.open_stream(owned, producer)
        before = compiled._fastpath.produced_directly()
        assert compiled.make_run(owned, raw, stream, writer.queue, tap).scan(consumed, 0) == 6
        writer.end_streams()
        assert compiled._fastpath.produced_directly() == before
        assert tap.counts["read"] == 6  # each kept by on_consume, so tried directly first
        assert not stream.live and owned.durability.queued == 6
        assert [(q[2], q[3]) for q in writer.queue] == [(b"k%d" % i, b"v%d" % i)
                                                        for i in range(6)]
        for i, q in enumerate(writer.queue):
            src = f"{raw}:0:{i}".encode()
            assert q[5] == src
            assert q[4] == [*written[i], (SRC, src)], q[4]
    finally:
        probe.close()
        store.close()


def read_messages(bootstrap: str, topic: str, count: int) -> tuple[list[Message], Tap]:
    """The first ``count`` records of partition 0 of ``topic``, as consumed, and the tap that
    kept them (router/native/_plugin.h: read in this thread)."""
    conf = {"bootstrap.servers": bootstrap, "group.id": f"g-{topic}",
            "enable.auto.commit": False}
    tap = compiled.client_tap(conf, consumer=True)
    assert tap is not None
    c = Consumer(conf)
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[Message] = []
    deadline = time.monotonic() + 30
    tap.begin()  # once: what every consume() below keeps is kept until the next begin()
    try:
        while len(got) < count and time.monotonic() < deadline:
            got.extend(m for m in c.consume(count - len(got), 1) if m.error() is None)
    finally:
        c.close()
    assert len(got) == count
    return got, tap
