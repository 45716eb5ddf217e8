"""A transactional batch's forwards produced as decided (router.durability.inline_output), on the
broker.

The stream holds back each output partition's newest forward, so the batch's last record is
the one produced at its end; a forward decided on the general path goes into the stream too,
and the partition's output stays in the order decided; the delivery check at the batch's end still
finds the batch contiguous; nothing is visible to a read_committed reader before the commit.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from cutover.headers import SRC
from cutover.settings import RouteSettings
from router.base.errors import OutputWriteFailed
from router.dedup.store import DedupStore
from router.durability.output_writer import OutputWriter
from router.durability.partition import Owned, RouteRuntime
from router.durability.resume import Durability
from router.rule.decision import PartitionRouter
from router.rule.identity import record_identity
from testground.brokers import BrokerUnderTest, create_topics
from tests.topics import read_topic

pytestmark = pytest.mark.broker


def _owned(output: str, raw: str, state: Path) -> Owned:
    rs = RouteSettings.model_validate({"name": "r", "inputs": [raw], "output": output})
    store = DedupStore(state / "store")
    router = PartitionRouter(0, identity=record_identity, store=store,
                             retention_ms=rs.dedup.retention_ms)
    return Owned(RouteRuntime(rs, record_identity, 1), 0, router, store,
                 Durability(next_offsets={raw: 0}, out_pos=0, known_end=0, rebuild_from=0))


@dataclass
class _Transactional:
    """A raw and an output topic, one owned partition, its transactional producer (ready,
    no transaction begun) and an output writer."""

    bootstrap: str
    raw: str
    out: str
    owned: Owned
    producer: Producer
    writer: OutputWriter

    @classmethod
    def start(cls, broker: BrokerUnderTest, tmp_path: Path) -> _Transactional:
        if broker.kind == "tansu":
            pytest.skip("transactions are off on Tansu")
        bootstrap = broker.bootstrap
        n = uuid.uuid4().hex[:8]
        raw, out = f"io-raw-{n}", f"io-out-{n}"
        create_topics(bootstrap, {raw: 1, out: 1})
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"io-{n}",
                             "linger.ms": 0})
        producer.init_transactions(30)
        probe = Consumer({"bootstrap.servers": bootstrap, "group.id": f"io-probe-{n}"})
        return cls(bootstrap, raw, out, _owned(out, raw, tmp_path), producer,
                   OutputWriter({"bootstrap.servers": bootstrap}, producer, probe))


def _uncommitted(bootstrap: str, topic: str) -> int:
    """How many records a read_uncommitted reader sees in partition 0 right now."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": uuid.uuid4().hex,
                  "isolation.level": "read_uncommitted"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10,
                                           cached=False)[1])
    finally:
        c.close()


def test_forwards_are_produced_as_decided_and_land_in_decision_order(
    broker: BrokerUnderTest, tmp_path: Path
) -> None:
    t = _Transactional.start(broker, tmp_path)
    bootstrap, raw, out, owned, producer, writer = (t.bootstrap, t.raw, t.out, t.owned,
                                                    t.producer, t.writer)
    writer.fence_foreign_writes([owned], every=True)
    producer.begin_transaction()
    stream = writer.open_stream(owned, producer)

    def value(i: int) -> bytes:
        return b"v%d" % i

    for i in range(5):   # the fast path's forwards
        stream.send(owned, raw, i, [("h", b"x")], b"k%d" % i, value(i))
    assert producer.flush(10) == 0
    assert _uncommitted(bootstrap, out) == 4, "the newest forward is held back"
    assert writer.queue == []
    writer.forward(owned, raw, 5, None, b"k5", value(5))   # a release, on the general path
    assert producer.flush(10) == 0
    assert _uncommitted(bootstrap, out) == 5, "produced as decided, the release held back"
    assert writer.queue == [] and stream.live
    stream.send(owned, raw, 6, None, b"k6", value(6))      # the rest of the run
    assert writer.queue == []
    writer.end_streams()
    assert writer.streams == {}
    assert [q[5] for q in writer.queue] == [f"{raw}:0:6".encode()]
    assert owned.durability.queued == 7
    sent = writer.send([owned], lambda _t, _p: producer)
    assert sent.writing == [owned]
    sent.check(owned, producer, 10.0)
    assert owned.durability.known_end == 7, "the batch landed contiguously"
    assert read_topic(bootstrap, out) == [], "nothing visible before the commit"
    producer.commit_transaction(30)
    deadline = time.monotonic() + 30
    while len(got := read_topic(bootstrap, out)) < 7 and time.monotonic() < deadline:
        time.sleep(0.1)   # the last stable offset moves once the commit's marker is written
    assert [r.value for r in got] == [value(i) for i in range(7)]
    assert [r.header(SRC) for r in got] == [f"{raw}:0:{i}" for i in range(7)]
    assert [r.header("h") for r in got] == ["x"] * 5 + [None] * 2
    writer.probe.close()


def test_a_produce_error_queues_the_rest_for_the_batch_s_end(broker: BrokerUnderTest,
                                                             tmp_path: Path) -> None:
    """The error is met again where the batch's end produces, which aborts the batch
    (router.durability.transactions); the stream loses nothing and keeps the order meanwhile."""
    t = _Transactional.start(broker, tmp_path)   # no transaction begun: a produce is refused
    raw, owned, writer = t.raw, t.owned, t.writer
    stream = writer.open_stream(owned, t.producer)
    for i in range(3):
        stream.send(owned, raw, i, None, b"k", b"v%d" % i)
    writer.end_streams()
    assert [q[3] for q in writer.queue] == [b"v0", b"v1", b"v2"]
    assert owned.durability.queued == 3
    writer.probe.close()


def test_another_writer_s_records_inside_the_open_transaction_fail_the_delivery_check(
    broker: BrokerUnderTest, tmp_path: Path
) -> None:
    """They land past the last stable offset, which the batch's own transaction holds at its
    first record, so they cannot be read before the transaction ends: the check before the
    commit refuses the batch, whose transaction is then aborted and replayed from its
    checkpoint (router.durability.transactions), and the replay's read back takes them in. Aborted
    here, they become readable, after the batch's own end."""
    t = _Transactional.start(broker, tmp_path)
    raw, out, owned, producer, writer = t.raw, t.out, t.owned, t.producer, t.writer
    writer.fence_foreign_writes([owned], every=True)
    producer.begin_transaction()
    stream = writer.open_stream(owned, producer)
    for i in range(3):
        stream.send(owned, raw, i, None, b"k%d" % i, b"v%d" % i)
    assert producer.flush(10) == 0          # two produced as decided, the third held back
    other = Producer({"bootstrap.servers": t.bootstrap})
    other.produce(out, b"foreign", b"kf", partition=0, headers=[(SRC, f"{raw}:0:10".encode())])
    assert other.flush(10) == 0
    assert writer.end_streams() is True     # the batch's first stream read the end already
    sent = writer.send([owned], lambda _t, _p: producer)
    with pytest.raises(OutputWriteFailed, match=r"3 records landed at offsets up to 3, not "
                       r"right after the end this worker knew \(0\)"):
        sent.check(owned, producer, 10.0)
    producer.abort_transaction(30)
    assert [r.value for r in read_topic(t.bootstrap, out)] == [b"foreign"]
    writer.probe.close()


def test_taking_in_another_writer_s_records_writes_no_identity_of_the_open_batch(
    broker: BrokerUnderTest, tmp_path: Path
) -> None:
    """The check before producing reads another writer's records in and writes their
    identities to the store at once (the next checkpoint may read back from past them); the
    batch's own forwards, decided and not yet delivered, must not reach the store's disk with
    them. The store is trusted one checkpoint behind (router.durability.takeover): an identity
    written before its record was delivered made the record's replay, after an abort or a crash, a
    duplicate, and the record was lost."""
    t = _Transactional.start(broker, tmp_path)
    raw, out, owned, writer = t.raw, t.out, t.owned, t.writer
    ours = record_identity(b"k", b"ours", 1_000)
    theirs = record_identity(b"kf", b"foreign", 2_000)
    owned.store.add(ours, 1_000)            # a forward of the open batch
    other = Producer({"bootstrap.servers": t.bootstrap})
    other.produce(out, b"foreign", b"kf", partition=0,
                  headers=[(SRC, f"{raw}:0:10".encode()), ("bg.event_time", b"2000")])
    assert other.flush(10) == 0
    writer.fence_foreign_writes([owned], every=True)
    assert owned.durability.known_end == 1 and (raw, 10) in owned.durability.skip
    assert theirs in owned.store and ours in owned.store
    owned.store.close()                     # the batch aborts: what was not flushed is gone
    reopened = DedupStore(tmp_path / "store")
    try:
        assert theirs in reopened
        assert ours not in reopened
    finally:
        reopened.close()
    writer.probe.close()
