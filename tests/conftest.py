"""Shared fixtures. The broker is started once per session from one place (testground.brokers):
Apache Kafka by default, ``CUTOVER_TEST_BROKER=tansu`` for the embedded broker, and
``CUTOVER_TEST_BOOTSTRAP=host:port`` for a Kafka that is already running."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from testground.brokers import BrokerUnderTest, broker_for_tests, create_topics


@pytest.fixture(scope="session")
def broker() -> Iterator[BrokerUnderTest]:
    with broker_for_tests() as b:
        yield b


@pytest.fixture(scope="session")
def bootstrap(broker: BrokerUnderTest) -> str:
    return broker.bootstrap


@pytest.fixture
def topic_factory(bootstrap: str) -> Callable[..., str]:
    """Create a uniquely named topic (explicit partition count) and return its name."""

    def make(prefix: str = "t", partitions: int = 2, compacted: bool = False) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        create_topics(bootstrap, {name: partitions}, compacted=[name] if compacted else [])
        return name

    return make
