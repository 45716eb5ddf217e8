"""Partitions a group leaves to no member (router.worker.orphans), on the real broker with its
defaults: how Kafka comes to leave them, and a nudge giving them out.

The scenario is the one a broker failure caused in the chaos soak: a cooperative rebalance
takes partitions from member ``a`` for member ``b``, and before ``a`` rejoins (it has not yet
consumed, so its revocation is not served) it is replaced by a consumer started with its
instance id. The coordinator gives the newcomer ``a``'s stored assignment without a
rebalance, and nothing starts the round that would give ``b`` the rest."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import Consumer, ConsumerGroupState
from confluent_kafka.admin import AdminClient

from router.worker.orphans import nudge
from testground.brokers import BrokerUnderTest

pytestmark = pytest.mark.broker

PARTITIONS = 6


def member_conf(bootstrap: str, group: str, instance: str | None) -> dict[str, Any]:
    return {"bootstrap.servers": bootstrap, "group.id": group,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": 6000, "heartbeat.interval.ms": 1000,
            "enable.auto.commit": False,
            **({"group.instance.id": instance} if instance else {})}


def poll_until(consumers: list[Consumer], done: Callable[[], bool], timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for c in consumers:
            c.poll(0.1)
        if done():
            return True
    return False


def assigned(c: Consumer) -> set[int]:
    return {tp.partition for tp in c.assignment()}


def unheld(bootstrap: str, group: str, topic: str) -> frozenset[tuple[str, int]] | None:
    """The partitions of ``topic`` that no member of the group holds, as its coordinator
    answers; None while the group is not stable."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    g = admin.describe_consumer_groups([group])[group].result(10)
    if g.state != ConsumerGroupState.STABLE:
        return None
    held = {(tp.topic, tp.partition) for m in g.members for tp in m.assignment.topic_partitions}
    return frozenset((topic, p) for p in range(PARTITIONS)) - held


def test_partitions_left_to_no_member_by_a_replaced_static_member_are_given_out(
        broker: BrokerUnderTest, topic_factory: Callable[..., str]) -> None:
    if broker.kind == "tansu":
        pytest.skip("the embedded broker has no static membership")
    topic, ckpt = topic_factory("orphans", partitions=PARTITIONS), topic_factory("ckpt", 1)
    group = f"g-{uuid.uuid4().hex[:8]}"
    a = Consumer(member_conf(broker.bootstrap, group, "a"))
    b = Consumer(member_conf(broker.bootstrap, group, "b"))
    a_again = Consumer(member_conf(broker.bootstrap, group, "a"))
    try:
        a.subscribe([topic])
        assert poll_until([a], lambda: len(assigned(a)) == PARTITIONS, 30)
        b.subscribe([topic])   # a keeps half; the other half waits for a to give it up
        assert poll_until([b], lambda: bool(b.memberid()) and unheld(
            broker.bootstrap, group, topic) is not None, 30)
        a_again.subscribe([topic])   # a replaced before it consumed again
        assert poll_until([b, a_again], lambda: bool(assigned(a_again)), 30)
        left = frozenset((topic, p) for p in set(range(PARTITIONS)) - assigned(a_again))
        assert left and not assigned(b)

        # Kafka leaves them so: a stable group, the partitions assigned to no member
        for _ in range(3):
            poll_until([b, a_again], lambda: False, 1.0)
            assert unheld(broker.bootstrap, group, topic) == left

        joined: list[bool] = []
        nudger = threading.Thread(target=lambda: joined.append(nudge(
            member_conf(broker.bootstrap, group, None), ckpt)))
        began = time.monotonic()
        nudger.start()   # the members go on consuming, and so take part in the rebalance
        assert poll_until([b, a_again], lambda: {(topic, p) for p in assigned(b)} == left, 30), \
            f"b holds {assigned(b)}, a holds {assigned(a_again)}"
        assert time.monotonic() - began < 15
        poll_until([b, a_again], lambda: not nudger.is_alive(), 30)
        assert joined == [True]
        assert poll_until([b, a_again], lambda: unheld(broker.bootstrap, group, topic) == set(),
                          10)
        assert len(assigned(a_again)) == PARTITIONS - len(left)   # a kept what it had
    finally:
        for c in (a_again, b, a):
            c.close()
