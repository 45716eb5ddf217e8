"""router.durability.positions on a real broker: the first record a positioned partition delivers is
checked against the position the data path gave it.

A client that lost a position is the boundary here: the test records a position without
giving it to the client (which is where the client lost it), and the check finds the partition
delivering from elsewhere, leaves those records undecided and has it put back; a client that
keeps losing it is given up. A position on a transaction marker, with nothing to read before
the next record, is accepted once the same record comes first twice.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import Consumer, Message, Producer, TopicPartition

from router.base.errors import ConsumerFailed
from router.durability.positions import MAX_RESEEKS, PositionCheck

pytestmark = pytest.mark.broker


def consumer(bootstrap: str) -> Consumer:
    return Consumer({"bootstrap.servers": bootstrap, "group.id": f"g-{uuid.uuid4().hex[:8]}",
                     "enable.auto.commit": False, "isolation.level": "read_committed"})


def hundred_records(bootstrap: str, topic_factory: Callable[..., str]) -> str:
    """A one-partition topic holding offsets 0-99."""
    topic = topic_factory("pos", partitions=1)
    p = Producer({"bootstrap.servers": bootstrap})
    for i in range(100):
        p.produce(topic, str(i).encode(), partition=0)
    p.flush(10)
    return topic


@contextlib.contextmanager
def a_lost_position(bootstrap: str, topic_factory: Callable[..., str]
                    ) -> Iterator[tuple[str, Consumer, PositionCheck]]:
    """A hundred records; the client reads from offset 30 while the check was told 10 (the
    position the client lost)."""
    topic = hundred_records(bootstrap, topic_factory)
    c = consumer(bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, 30)])
        check = PositionCheck()
        check.positioned([TopicPartition(topic, 0, 10)])
        yield topic, c, check
    finally:
        c.close()


def first_batch(c: Consumer, n: int = 5, timeout: float = 20.0) -> list[Message]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msgs = [m for m in c.consume(n, 0.5) if m.error() is None]
        if msgs:
            return msgs
    raise AssertionError("nothing delivered")


def test_a_partition_delivering_past_its_position_is_put_back_and_its_records_held(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    with a_lost_position(bootstrap, topic_factory) as (topic, c, check):
        batch = first_batch(c)
        assert batch[0].offset() == 30
        found = check.check(c, batch, [(topic, 0)])
        assert found.kept == [] and [(t.topic, t.partition, t.offset) for t in found.seek] \
            == [(topic, 0, 10)]
        c.seek(found.seek[0])
        again = first_batch(c)
        confirmed = check.check(c, again, [(topic, 0)])
        assert again[0].offset() == 10 and confirmed.kept == again and confirmed.seek == []
        assert check.expected == {}   # confirmed: later batches are not scanned


def test_records_before_the_position_confirm_nothing_when_the_partition_then_jumps_past_it(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    """Records 5-7 come first (delivered again from before the position 10), then the client
    goes on from 30: the records 10-29 would be skipped. The check looks past the records
    before the position, finds the jump and has the partition put back."""
    topic = hundred_records(bootstrap, topic_factory)
    before, after = consumer(bootstrap), consumer(bootstrap)
    try:
        before.assign([TopicPartition(topic, 0, 5)])
        after.assign([TopicPartition(topic, 0, 30)])
        stale = first_batch(before, 3)
        jumped = first_batch(after)
        assert [m.offset() for m in stale] == [5, 6, 7] and jumped[0].offset() == 30
        check = PositionCheck()
        check.positioned([TopicPartition(topic, 0, 10)])
        found = check.check(after, stale + jumped, [(topic, 0)])
        assert found.kept == [] and [(t.topic, t.partition, t.offset) for t in found.seek] \
            == [(topic, 0, 10)]
        # records before the position and then the position itself: confirmed
        before.seek(TopicPartition(topic, 0, 8))
        again = first_batch(before, 5)
        assert [m.offset() for m in again] == [8, 9, 10, 11, 12]
        confirmed = check.check(before, again, [(topic, 0)])
        assert confirmed.kept == again and confirmed.seek == [] and check.expected == {}
    finally:
        before.close()
        after.close()


def test_a_client_that_keeps_losing_a_position_is_given_up(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    with a_lost_position(bootstrap, topic_factory) as (topic, c, check):
        for _ in range(MAX_RESEEKS):
            assert len(check.check(c, first_batch(c), [(topic, 0)]).seek) == 1
        with pytest.raises(ConsumerFailed, match="delivered from past it"):
            check.check(c, first_batch(c), [(topic, 0)])


def test_a_position_with_nothing_before_the_next_record_is_accepted_when_it_repeats(
        bootstrap: str, topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("pos", partitions=1)
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"t-{topic}"})
    p.init_transactions(30)
    for _ in range(2):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, str(i).encode(), partition=0)
        p.commit_transaction(30)   # offsets 0-4 and a marker at 5, then 6-10 and 11
    c = consumer(bootstrap)
    try:
        at = TopicPartition(topic, 0, 5)   # the first transaction's marker
        c.assign([at])
        check = PositionCheck()
        check.positioned([at])
        batch = first_batch(c)
        assert batch[0].offset() == 6
        found = check.check(c, batch, [(topic, 0)])
        assert found.kept == [] and len(found.seek) == 1
        c.seek(found.seek[0])
        again = first_batch(c)
        accepted = check.check(c, again, [(topic, 0)])
        assert again[0].offset() == 6 and accepted.kept == again and accepted.seek == []
        assert check.expected == {}
    finally:
        c.close()


def test_a_partition_given_up_is_no_longer_waited_for(bootstrap: str,
                                                     topic_factory: Callable[..., str]) -> None:
    topic = topic_factory("pos", partitions=2)
    c = consumer(bootstrap)
    try:
        check = PositionCheck()
        check.positioned([TopicPartition(topic, 0, 0), TopicPartition(topic, 1, 0)])
        assert check.check(c, [], [(topic, 1)]).kept == []
        assert set(check.expected) == {(topic, 1)}
    finally:
        c.close()
