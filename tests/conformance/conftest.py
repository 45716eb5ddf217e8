"""The full grid's brokers: one three-broker Apache Kafka cluster for the whole `make
conformance` run (emulated grid and real-Spark slice), and Tansu for the second emulated grid."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from testground.brokers import BrokerUnderTest, broker_for_tests


@pytest.fixture(scope="session")
def kafka_cluster() -> Iterator[BrokerUnderTest]:
    with broker_for_tests(size=3, kind="kafka") as b:
        yield b
