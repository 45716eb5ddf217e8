"""The full grid's brokers: one three-broker Apache Kafka cluster for the whole `make
conformance` run (emulated grid and real-Spark slice), and Tansu for the second emulated grid;
and for each module of chaos-run cells (fault cells, canary cells) its own three-node Apache
Kafka with broker defaults."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from testground import brokers
from testground.brokers import BrokerUnderTest, broker_for_tests
from testground.kafka_broker import KafkaCluster


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[BrokerUnderTest]:
    with broker_for_tests(size=3, kind="kafka") as b:
        yield b


@pytest.fixture(scope="module")
def defaults_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaCluster]:
    """Three nodes with Apache Kafka's defaults (replication 3, min.insync 2), started by the
    test itself: the fault cells' and the canary cells' cluster."""
    if os.environ.get(brokers.EXTERNAL_BOOTSTRAP_ENV) or brokers.test_broker_kind() != "kafka":
        pytest.skip("chaos-run cells start their own three-node Apache Kafka")
    root = tmp_path_factory.mktemp("defaults-kafka")
    with KafkaCluster(size=3, root=root, broker_defaults=True) as cluster:
        yield cluster
