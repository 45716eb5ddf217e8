"""Where Tansu (the demo's embedded broker, the tests' second target) differs from Apache Kafka,
and the test ground's workaround for each, applied only when :func:`is_tansu` says so:

* unknown topics are auto-created with 4 partitions -> always create topics explicitly
  (:func:`cutover.topic_admin.create_topics`; Apache Kafka runs with auto-creation off in tests);
* ``ListOffsets(LATEST)`` answers the last batch's base offset + 1 -> :func:`tansu_end_offsets`
  reads the Fetch high watermark instead;
* JoinGroup waits ``session.timeout.ms / 2`` -> tests use short (~6 s) sessions;
* ``read_committed`` does not hide aborted transactional records, and consumer-commit
  metadata is not kept -> no guarantee rests on either there (the router finds the first by
  asking the broker: :mod:`cutover.broker_capabilities`).
"""

from __future__ import annotations

import functools
import os
import time
from typing import cast

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient

from cutover.kafka_types import DataMessage, PartitionEnd
from cutover.topic_admin import BrokerError

TANSU_CLUSTER_ID = "tansu_cluster"


@functools.lru_cache(maxsize=64)
def _cluster_id(bootstrap: str, extra: tuple[tuple[str, str], ...]) -> str | None:
    try:
        meta = AdminClient({"bootstrap.servers": bootstrap, **dict(extra)}).list_topics(
            timeout=10.0
        )
    except KafkaException:
        return None
    cluster_id: str | None = meta.cluster_id
    return cluster_id


def is_tansu(bootstrap: str, extra: dict[str, str] | None = None) -> bool:
    """Whether the broker at ``bootstrap`` is Tansu (it names its cluster ``tansu_cluster``)."""
    return _cluster_id(bootstrap, tuple(sorted((extra or {}).items()))) == TANSU_CLUSTER_ID


def tansu_end_offsets(
    bootstrap: str, topic: str, n: int, extra: dict[str, str] | None, timeout: float
) -> dict[int, int]:
    """End offsets read from Fetch: a consumer assigned at the beginning polls each partition.

    The high watermark a fetch returns is right on Tansu, while ListOffsets(LATEST) is not.
    """
    consumer = Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"cutover-hwm-{os.getpid()}",
        "enable.auto.commit": False, "enable.partition.eof": True,
        **(extra or {}),
    })
    try:
        ends: dict[int, int] = {}
        consumer.assign([TopicPartition(topic, p, 0) for p in range(n)])
        deadline = time.monotonic() + timeout
        while len(ends) < n and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is None:
                # Partitions with a cached high watermark answer without a message.
                for p in range(n):
                    if p in ends:
                        continue
                    low, high = consumer.get_watermark_offsets(
                        TopicPartition(topic, p), cached=True
                    )
                    if high >= 0 and high != -1001 and low >= 0:
                        ends.setdefault(p, high)
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:  # offset is the end
                    eof = cast(PartitionEnd, msg)
                    ends[eof.partition()] = eof.offset()
                continue
            msg = cast(DataMessage, msg)
            _, high = consumer.get_watermark_offsets(
                TopicPartition(topic, msg.partition()), cached=True
            )
            if high >= 0:
                ends.setdefault(msg.partition(), high)
        if len(ends) < n:
            raise BrokerError(f"could not read end offsets of {topic!r} within {timeout:.0f}s")
        return ends
    finally:
        consumer.close()
