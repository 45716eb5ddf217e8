"""Never alive and idle (DESIGN.md, "Liveness"), on the real broker: a client error the worker
cannot go on from is handled by rebuilding its clients and rejoining, without a restart."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from cutover.settings import RouterSettings
from router.base.kafka_io import data_consumer_conf
from testground.brokers import BrokerUnderTest
from tests.integration.harness import (
    Env,
    Job,
    RouterProcess,
    check_output,
    events,
    takeovers,
)

pytestmark = pytest.mark.broker

REBUILT = "rebuilding the data consumer"
KEPT = "partitions kept until the group says whether they stay"


def test_a_fenced_static_member_rebuilds_its_consumer_and_forwards_again(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    """Another consumer joins with the worker's group.instance.id: the coordinator fences the
    worker's member, a fatal error for its consumer (what a coordinator's failover did to both
    workers of a route). The worker rebuilds its consumer, takes its place back and forwards
    the rest of the stream exactly once. With transactions its partitions are kept through the
    rebuild (nothing else wrote them: the intruder has no producer), so none is taken over
    again."""
    if broker.kind == "tansu":
        pytest.skip("the embedded broker has no static membership")
    env = Env(broker.bootstrap, tmp_path, partitions=2)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    router = RouterProcess(env, args=("--instance-id", "w1"))
    try:
        router.wait_started()
        blue = Job(env, "blue")
        blue.emit(events(0, 200))
        env.wait_output(200)

        strategy = data_consumer_conf(RouterSettings.model_validate(
            {"bootstrap": broker.bootstrap, "routes": [
                {"name": env.route, "inputs": env.inputs, "output": env.output}]}),
            None)["partition.assignment.strategy"]
        intruder = Consumer({"bootstrap.servers": broker.bootstrap,
                             "group.id": f"g-{env.name}", "group.instance.id": "w1",
                             "session.timeout.ms": 6000, "enable.auto.commit": False,
                             # a second worker started with the same instance id: the same
                             # assignment as the router's (a group cannot mix two)
                             "partition.assignment.strategy": strategy})
        try:
            intruder.subscribe(env.inputs)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and REBUILT not in router.text():
                intruder.poll(0.2)
        finally:
            intruder.close()
        # the fatal error, or the assignment it took away, whichever the worker meets first
        assert "Static consumer fenced" in router.text(), router.tail(60)
        assert REBUILT in router.text(), router.tail(60)

        blue.emit(events(200, 400))
        env.wait_output(400, timeout=60)
        check_output(env, events(0, 400), lambda p, t: "blue")
        router.assert_alive()
        text = router.text()
        if "transactions on" in text:
            assert KEPT in text, router.tail(60)
            after = text[text.index(KEPT):]
            assert "kept through the rebalance" in after, router.tail(60)
            assert "resume at" not in after, "a partition was taken over again"
    finally:
        router.stop()


def test_a_worker_restarted_between_a_rebalance_s_two_rounds_leaves_no_partition_unowned(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    """What a broker failure did in the chaos soak, made on purpose. Worker w1's member (a
    consumer standing in for a w1 that froze, then was killed) holds the four partitions; w2
    joins, and the cooperative rebalance's first round takes two of them from w1 for w2; w1
    never consumes again, so never gives them up, and the second round that would give them
    to w2 waits for its rejoin. w1 is restarted with its instance id before it: Kafka hands
    it its member's stored assignment (the other two) without a rebalance, and the two in
    between are assigned to no member. The restarted w1 makes the group rebalance once
    (router.worker.orphans): w2 takes them, and every event is routed exactly once."""
    if broker.kind == "tansu":
        pytest.skip("the embedded broker has no static membership")
    env = Env(broker.bootstrap, tmp_path, partitions=4)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0
    frozen = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{env.name}",
                       "group.instance.id": "w1", "session.timeout.ms": 6000,
                       "enable.auto.commit": False,
                       "partition.assignment.strategy": "cooperative-sticky"})
    frozen.subscribe(env.inputs)
    w2 = RouterProcess(env, name="w2", args=("--instance-id", "w2"))
    w1: RouterProcess | None = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(frozen.assignment()) < 4:
            frozen.poll(0.2)
        assert len(frozen.assignment()) == 4
        w2.wait_started()   # the first round: two of the four move, and wait for w1's rejoin
        assert takeovers(w2) == [set()], w2.tail(30)
        w1 = RouterProcess(env, name="w1", args=("--instance-id", "w1"))
        w1.wait_started()
        env.wait_for("w2 takes the partitions no member held", lambda: any(takeovers(w2)), 30)
        kept, taken = takeovers(w1)[0], takeovers(w2)[-1]
        assert kept and taken == set(range(4)) - kept, (kept, taken, w2.tail(30))
        assert "making the group rebalance once" in w1.text(), w1.tail(30)

        blue = Job(env, "blue")
        blue.emit(events(0, 400))
        env.wait_output(400, timeout=60)
        check_output(env, events(0, 400), lambda p, t: "blue")
        w1.assert_alive()
        w2.assert_alive()
    finally:
        for worker in (w1, w2):
            if worker is not None:
                worker.stop()
        frozen.close()
