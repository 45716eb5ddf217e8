"""The secured Apache Kafka of the security suite: started once per session, on loopback.

It runs whatever broker the rest of the suite uses (``CUTOVER_TEST_BROKER``), since the
embedded broker has no authentication or authorisation to test.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from cutover.secure_kafka import SecuredKafka, secured_kafka
from tests.security.support import SecuredRoute


@pytest.fixture(scope="session")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecuredKafka]:
    with secured_kafka(tmp_path_factory.mktemp("secured-kafka")) as kafka:
        yield kafka


@pytest.fixture
def route(secured: SecuredKafka, tmp_path: Path) -> SecuredRoute:
    return SecuredRoute(secured, tmp_path)
