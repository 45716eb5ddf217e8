"""The admin helpers the CLI and the demo share: waiting until a broker answers, creating topics
with explicit partition counts, and reading a topic's partition count.

They speak only the Kafka protocol (an AdminClient), whatever the broker: the demo's embedded one
(:mod:`cutover.demo_broker`), an operator's cluster, or the brokers the tests start.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterable

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewTopic


class BrokerError(RuntimeError):
    """A broker could not be started, did not answer, or lacks a topic a caller needs."""


def wait_until_ready(
    bootstrap: str, timeout: float = 20.0, process: subprocess.Popen[bytes] | None = None
) -> None:
    """Block until the broker answers a metadata request (``process``: the broker's own, when
    the caller started it, so that its exit ends the wait at once)."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if process is not None and process.poll() is not None:
            raise BrokerError(f"broker exited with code {process.returncode} while starting")
        try:
            AdminClient({"bootstrap.servers": bootstrap, "log_level": 0}).list_topics(timeout=1.0)
            return
        except KafkaException as exc:
            last = exc
            time.sleep(0.1)
    raise BrokerError(f"no Kafka broker answered at {bootstrap} within {timeout:.0f}s ({last})")


def create_topics(
    bootstrap: str,
    topics: dict[str, int],
    *,
    compacted: Iterable[str] = (),
    extra: dict[str, str] | None = None,
    timeout: float = 15.0,
) -> None:
    """Create topics with explicit partition counts; an existing one must have the same count."""
    compact = set(compacted)
    admin = AdminClient({"bootstrap.servers": bootstrap, **(extra or {})})
    existing = admin.list_topics(timeout=timeout).topics
    new = []
    for name, partitions in topics.items():
        if name in existing:
            have = len(existing[name].partitions)
            if have != partitions:
                raise BrokerError(
                    f"topic {name!r} exists with {have} partitions, {partitions} are needed"
                )
            continue
        config = {"cleanup.policy": "compact"} if name in compact else {}
        new.append(NewTopic(name, num_partitions=partitions, replication_factor=-1, config=config))
    if not new:
        return
    for name, fut in admin.create_topics(new, request_timeout=timeout).items():
        try:
            fut.result(timeout=timeout)
        except KafkaException as exc:
            if "TOPIC_ALREADY_EXISTS" not in str(exc):
                raise BrokerError(f"could not create topic {name!r}: {exc}") from exc


def partition_count(bootstrap: str, topic: str, extra: dict[str, str] | None = None) -> int:
    # List all topics: asking for one by name makes a broker with auto-creation create it.
    meta = AdminClient({"bootstrap.servers": bootstrap, **(extra or {})}).list_topics(
        timeout=10.0
    )
    t = meta.topics.get(topic)
    if t is None or t.error is not None or not t.partitions:
        raise BrokerError(f"topic {topic!r} does not exist on {bootstrap}")
    return len(t.partitions)
