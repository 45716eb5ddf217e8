"""The Kafka Streams application the router is benchmarked against is built with the Kafka
client of the broker the suite runs, so both sides speak the same protocol version."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

JVM = Path(__file__).resolve().parents[2] / "jvm"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def _kafka_version(pom: Path) -> str:
    found = ET.parse(pom).getroot().find("m:properties/m:kafka.version", NS)
    assert found is not None and found.text, f"{pom} names no kafka.version"
    return found.text


def test_kafka_streams_is_the_version_of_the_suites_broker() -> None:
    assert (_kafka_version(JVM / "streams-router" / "pom.xml")
            == _kafka_version(JVM / "kafka-broker.pom.xml"))
