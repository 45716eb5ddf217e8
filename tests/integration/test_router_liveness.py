"""Never alive and idle (DESIGN.md, "Liveness"), on the real broker: a client error the worker
cannot go on from is handled by rebuilding its clients and rejoining, without a restart."""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer

from cutover.settings import RouterSettings
from router.base.kafka_io import data_consumer_conf
from testground.brokers import BrokerUnderTest
from tests.integration.harness import Env, Job, RouterProcess, check_output, events

pytestmark = pytest.mark.broker

REBUILT = "rebuilding the data consumer"
KEPT = "partitions kept until the group says whether they stay"
TOOK = re.compile(r"took over partitions (\[[^\]]*\])")


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


def test_partitions_the_group_left_to_no_member_are_taken_by_a_worker(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    """What a broker failure did in the chaos soak, made on purpose: a cooperative rebalance
    takes half the partitions from member x for the worker, and x is replaced by a consumer
    started with its instance id before it gave them up. Kafka gives the newcomer x's stored
    assignment without a rebalance, and that half is assigned to no member, the worker
    holding none of it (router.worker.orphans). The worker sees that, makes the group
    rebalance, takes the half and routes it; once the newcomer is gone, the worker routes
    everything, exactly once."""
    if broker.kind == "tansu":
        pytest.skip("the embedded broker has no static membership")
    env = Env(broker.bootstrap, tmp_path, partitions=4)
    assert env.cli("switch", "--route", env.route, "--to", "blue", "--at", "auto") == 0

    def member() -> Consumer:
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"g-{env.name}",
                      "group.instance.id": "x", "session.timeout.ms": 6000,
                      "enable.auto.commit": False,
                      "partition.assignment.strategy": "cooperative-sticky"})
        c.subscribe(env.inputs)
        return c

    x = member()
    router = RouterProcess(env, args=("--instance-id", "w1"))
    newcomer: Consumer | None = None
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(x.assignment()) < 4:
            x.poll(0.2)
        assert len(x.assignment()) == 4
        router.wait_started()   # x is not consumed from again: it never gives its half up
        assert "took over partitions []" in router.text(), router.tail(30)
        newcomer = member()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "took over partitions [(" not in router.text():
            newcomer.poll(0.2)
        assert "are assigned to no member" in router.text(), router.tail(40)
        kept = {tp.partition for tp in newcomer.assignment()}
        taken = {p for _, p in ast.literal_eval(
            TOOK.findall(router.text())[-1])}
        assert taken == set(range(4)) - kept and kept, (taken, kept, router.tail(40))

        newcomer.close()   # static: its partitions move once its session has expired
        newcomer = None
        blue = Job(env, "blue")
        blue.emit(events(0, 400))
        env.wait_output(400, timeout=60)
        check_output(env, events(0, 400), lambda p, t: "blue")
        router.assert_alive()
    finally:
        router.stop()
        for c in (newcomer, x):
            if c is not None:
                c.close()
