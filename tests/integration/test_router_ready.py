"""The worker says it is ready only when it is: its data consumer has joined the group and
taken over its first assignment. Faust's own "Ready" line, which came as soon as its web server
ran (before the data path had reached Kafka), is not printed."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from confluent_kafka import ConsumerGroupState
from confluent_kafka.admin import AdminClient

from testground.brokers import BrokerUnderTest
from tests.integration.harness import Env, RouterProcess

pytestmark = pytest.mark.broker

READY = re.compile(r"router worker (\S+) ready: joined group (\S+) and owns (.*?) *$", re.M)


def test_ready_is_logged_once_the_worker_has_joined_and_owns_its_partitions(
        broker: BrokerUnderTest, tmp_path: Path) -> None:
    if broker.kind == "tansu":
        pytest.skip("the embedded broker has no static membership to describe")
    env = Env(broker.bootstrap, tmp_path, partitions=2)
    router = RouterProcess(env, args=("--instance-id", "w1"))
    try:
        router.wait_for_line(" ready: ", timeout=90)
        # The group has the worker with both partitions (the coordinator shows assignments
        # only while the group is stable: asked until it is).
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        group = f"g-{env.name}"
        deadline = time.monotonic() + 30
        while True:
            desc = admin.describe_consumer_groups([group])[group].result(timeout=30)
            if desc.state == ConsumerGroupState.STABLE or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert desc.state == ConsumerGroupState.STABLE, desc.state
        (member,) = [m for m in desc.members if m.group_instance_id is not None]
        assert member.group_instance_id == "w1"
        assert sorted((tp.topic, tp.partition) for tp in member.assignment.topic_partitions) \
            == [(env.inputs[0], 0), (env.inputs[0], 1)]
        text = router.text()
        (ready,) = READY.findall(text)
        assert ready == ("w1", group, f"partitions [('{env.route}', 0), ('{env.route}', 1)]")
        # after the data path started and subscribed (that line comes first), never before
        assert text.index("router worker w1 started") < text.index("router worker w1 ready")
        assert "Ready" not in text, "Faust's own line, printed before the data path joined"
        # alone in its group it holds every partition: none can be assigned to no member, so
        # it does not make the group rebalance (router.worker.orphans)
        assert "holds every raw partition" in text, router.tail(30)
        assert "making the group rebalance once" not in text, router.tail(30)
        router.assert_alive()
    finally:
        router.stop()
