"""Shared fixtures. The broker is started once per session from one place (cutover.broker), so
setting CUTOVER_TEST_BOOTSTRAP=host:port runs the same suite against a real Kafka."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator

import pytest

from cutover.broker import broker_for_tests, create_topics


@pytest.fixture(scope="session")
def bootstrap() -> Iterator[str]:
    with broker_for_tests() as address:
        yield address


@pytest.fixture
def topic_factory(bootstrap: str) -> Callable[..., str]:
    """Create a uniquely named topic (explicit partition count) and return its name."""

    def make(prefix: str = "t", partitions: int = 2, compacted: bool = False) -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:10]}"
        create_topics(bootstrap, {name: partitions}, compacted=[name] if compacted else [])
        return name

    return make
