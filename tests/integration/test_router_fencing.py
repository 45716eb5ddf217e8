"""Output-writer fencing on the real broker: a previous owner's late write (a zombie) that lands
after the new owner read the output back is found before the new owner writes, and a late
checkpoint of an older ownership generation never wins."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from cutover.headers import SRC, TaggedRecord
from router.base.kafka_io import base_conf
from router.durability.checkpoint import Checkpoint, read_checkpoints, write_checkpoints
from router.durability.fencing import end_open_transactions, open_transactions
from router.durability.transactions import slot_ids
from router.rule.decision import PartitionSnapshot
from testground.brokers import BrokerUnderTest, end_offsets
from tests.integration.harness import Env, Job, RouterProcess, check_output, events

pytestmark = pytest.mark.broker


@pytest.mark.parametrize("transactions", ["off", "on"])
def test_zombie_write_after_readback_is_not_forwarded_again(broker: BrokerUnderTest,
                                                           tmp_path: Path,
                                                           transactions: str) -> None:
    """Without transactions the batch's output is queued, and the check before producing it
    drops the queued records the zombie's cover; with them each partition's output is produced
    as decided, so the check runs before the partition's first record of the batch is decided
    and the zombie's records are duplicates when their raw records come. The zombie wrote to
    both output partitions: the check reads them together, and tells each one's records
    apart."""
    if transactions == "on" and broker.kind == "tansu":
        pytest.skip("transactions are off on Tansu")
    bootstrap = broker.bootstrap
    env = Env(bootstrap, tmp_path, partitions=2, transactions=transactions)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    router = RouterProcess(env)
    try:
        router.wait_started()
        blue = Job(env, "blue")
        blue.emit(events(0, 200))
        env.wait_output(200)
        # The next micro-batch, as the owner would forward it. A stalled previous owner writes
        # the first 40 records of partition 0 and 30 of partition 1 into the output now, after
        # this owner's read-back and before the raw records reach it.
        nxt = events(200, 400)
        raw_ends = end_offsets(bootstrap, env.inputs[0])
        zombie = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
        wm = blue.watermark
        for p, n in ((0, 40), (1, 30)):
            for i, e in enumerate([e for e in nxt if e.i % 2 == p][:n]):
                hdrs = TaggedRecord(version="blue", event_time=e.t, watermark=wm,
                                    batch=blue.batch).to_headers()
                hdrs.append((SRC, f"{env.inputs[0]}:{p}:{raw_ends[p] + i}".encode()))
                zombie.produce(env.output, blue.value(e), e.key, partition=p, headers=hdrs)
        assert zombie.flush(10) == 0
        blue.emit(nxt)
        env.wait_output(400)
        check_output(env, events(0, 400), lambda p, t: "blue")
        text = router.text()
        for p, n in ((0, 40), (1, 30)):
            dropped = n if transactions == "off" else 0
            assert f"output {env.output}:{p}: {n} records from another writer" in text, \
                text[-3000:]
            assert f"{dropped} queued outputs they cover were dropped" in text
        router.assert_alive()
    finally:
        router.stop()


def test_late_checkpoint_of_an_older_owner_does_not_win(bootstrap: str,
                                                       topic_factory) -> None:
    topic = topic_factory("ckpt", partitions=1, compacted=True)

    def ck(gen: int, seq: int, offset: int) -> Checkpoint:
        return Checkpoint(route="r", partition=0, seq=seq, offsets={"r.raw": offset},
                          snapshot=PartitionSnapshot(partition=0), readback_from=0,
                          rebuild_from=0, worker=f"w{gen}", owner_gen=gen)

    producer = Producer({"bootstrap.servers": bootstrap})
    write_checkpoints(producer, topic, [ck(1, 4, 100)])
    write_checkpoints(producer, topic, [ck(2, 5, 150)])   # the new owner takes over
    write_checkpoints(producer, topic, [ck(1, 5, 120)])   # the old one writes late
    write_checkpoints(producer, topic, [ck(1, 6, 130)])
    got = read_checkpoints(base_conf(bootstrap), topic, {("r", 0)})[("r", 0)]
    assert (got.owner_gen, got.seq, got.offsets) == (2, 5, {"r.raw": 150})


def _open_transaction(bootstrap: str, tid: str, topic: str) -> Producer:
    """A writer that froze or died mid-batch: its transaction holds ``topic`` back, open."""
    writer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
    writer.init_transactions(30)
    writer.begin_transaction()
    writer.produce(topic, b"never committed", partition=0)
    assert writer.flush(10) == 0
    return writer


def test_a_writer_that_left_the_group_is_fenced_at_once_and_a_member_after_the_grace(
        broker: BrokerUnderTest, topic_factory: Callable[..., str]) -> None:
    """A takeover finds a transaction open on its partition's output. The writer the
    checkpoint names is no member of the group (killed, or frozen past its session): it
    commits nothing in any grace, and is fenced at once. A writer that is still a member may
    be committing its last batch: it is given the grace first."""
    if broker.kind == "tansu":
        pytest.skip("transactions are off on Tansu")
    bootstrap = broker.bootstrap
    raw, out = topic_factory("raw", partitions=1), topic_factory("out", partitions=1)
    ckpts = topic_factory("ckpt", partitions=1, compacted=True)
    group = f"fence-{uuid.uuid4().hex[:8]}"
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                       "group.instance.id": "w-alive", "session.timeout.ms": 6000})
    member.subscribe([raw])
    deadline = time.monotonic() + 30
    while not member.assignment():
        assert time.monotonic() < deadline, "the member did not join"
        member.poll(0.2)
    conf = base_conf(bootstrap)
    try:
        for writer_id, grace, fast in (("w-dead", 10.0, True), ("w-alive", 2.0, False)):
            write_checkpoints(Producer({"bootstrap.servers": bootstrap}), ckpts, [Checkpoint(
                route="r", partition=0, seq=1, offsets={raw: 0},
                snapshot=PartitionSnapshot(partition=0), readback_from=0, rebuild_from=0,
                worker=writer_id)])
            writer = _open_transaction(bootstrap, slot_ids(group, writer_id)[1], out)
            began = time.monotonic()
            assert end_open_transactions(conf, group, "w-new", ckpts, {out: {0}}, {("r", 0)},
                                         grace_s=grace, settle_s=10.0)
            took = time.monotonic() - began
            assert (took < grace) if fast else (took >= grace), (writer_id, took)
            with pytest.raises(KafkaException):   # fenced: its transaction was aborted
                writer.commit_transaction(10)
            assert not open_transactions(conf, [TopicPartition(out, 0)], 0.0)
    finally:
        member.close()
