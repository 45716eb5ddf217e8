"""confluent-kafka helpers shared by the source, the sink and the tagger.

Clients are cached per process and configuration: Spark reuses its Python workers across tasks,
and a new client costs a connection and a metadata round trip (~0.5 s on the test broker).
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar, cast

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from cutover.kafka_types import DataMessage, PartitionEnd

T = TypeVar("T")

# librdkafka needs a group.id on every consumer and looks up that group's coordinator even when
# the consumer only assigns partitions and never commits (the source's readers and probes). A
# principal granted its topics but no group (least privilege, as Spark's JVM consumer needs no
# group right for assigned reads) gets this as an error event; it says nothing about the reads.
GROUP_ONLY_ERRORS = frozenset({KafkaError.GROUP_AUTHORIZATION_FAILED})

_lock = threading.Lock()
_consumers: dict[str, Consumer] = {}
_producers: dict[str, Producer] = {}


def _key(config: Mapping[str, Any]) -> str:
    return json.dumps(sorted((k, str(v)) for k, v in config.items()))


def _client_error(exc: Exception, config: Mapping[str, Any]) -> Exception:
    text = str(exc)
    if "No such configuration property" in text or "Invalid value" in text:
        return ValueError(f"Kafka client configuration rejected ({text}); the kafka.* options "
                          "are passed to librdkafka, check their names and values")
    return exc


def _cached(cache: dict[Any, Any], make: Callable[[dict[str, Any]], T],
            config: Mapping[str, Any]) -> T:
    key = _key(config)
    with _lock:
        client = cache.get(key)
        if client is None:
            try:
                client = make(dict(config))
            except (KafkaException, ValueError, TypeError) as exc:
                raise _client_error(exc, config) from exc
            cache[key] = client
        return client


def cached_consumer(config: Mapping[str, Any]) -> Consumer:
    """A consumer for this configuration, reused by later tasks in the same worker."""
    return _cached(_consumers, Consumer, config)


def cached_producer(config: Mapping[str, Any]) -> Producer:
    """A producer for this configuration, reused by later tasks in the same worker."""
    return _cached(_producers, Producer, config)


def drop_producer(config: Mapping[str, Any]) -> None:
    """Forget a producer after a failure: an idempotent producer can be left unusable."""
    with _lock:
        producer = _producers.pop(_key(config), None)
    if producer is not None:
        producer.flush(5)


def topic_partitions(client: Producer | Consumer, topic: str, timeout: float = 10.0) -> int:
    """Number of partitions of ``topic``; raises if the topic does not exist."""
    meta = client.list_topics(topic, timeout=timeout)
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        reason = info.error if info is not None else "not in metadata"
        raise KafkaException(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART,
                                        f"topic {topic!r} is not available: {reason}"))
    return len(info.partitions)


def matching_topics(client: Consumer, pattern: str, timeout: float = 10.0) -> list[str]:
    regex = re.compile(pattern)
    meta = client.list_topics(timeout=timeout)
    return sorted(t for t in meta.topics if regex.fullmatch(t) and not t.startswith("__"))


class EndOffsetProbe:
    """Reads partitions' end offsets from Fetch responses (the high watermark).

    ListOffsets(LATEST) is wrong on the embedded test broker and right on Kafka; Fetch is right on
    both. Each call assigns the partitions at their last known end and waits for one fetch
    answer per partition: an EOF event (nothing new: the end is that offset) or a first message
    (the cached high watermark of that fetch is the end).
    """

    def __init__(self, config: Mapping[str, Any]) -> None:
        self._consumer = Consumer({**config, "enable.partition.eof": True,
                                   "auto.offset.reset": "earliest"})
        self._known: dict[tuple[str, int], int] = {}

    def close(self) -> None:
        self._consumer.close()

    @property
    def consumer(self) -> Consumer:
        return self._consumer

    def ends(
        self, partitions: Iterable[tuple[str, int]], timeout: float = 30.0
    ) -> dict[tuple[str, int], int]:
        """End offset of every partition; raises TimeoutError when a partition never answers."""
        return self._probe(partitions, timeout, want_first=False)[1]

    def begins_and_ends(
        self, partitions: Iterable[tuple[str, int]], timeout: float = 30.0
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        """(earliest available offset, end offset) of every partition."""
        return self._probe(partitions, timeout, want_first=True)

    def _probe(
        self, partitions: Iterable[tuple[str, int]], timeout: float, want_first: bool
    ) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], int]]:
        wanted = sorted(set(partitions))
        if not wanted:
            return {}, {}
        starts = {tp: (OFFSET_BEGINNING if want_first else self._known.get(tp, OFFSET_BEGINNING))
                  for tp in wanted}
        self._consumer.assign([TopicPartition(t, p, o) for (t, p), o in starts.items()])
        firsts: dict[tuple[str, int], int] = {}
        ends: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + timeout
        try:
            while len(ends) < len(wanted):
                if time.monotonic() > deadline:
                    missing = [f"{t}:{p}" for t, p in wanted if (t, p) not in ends]
                    raise TimeoutError(f"no fetch answer within {timeout:.0f}s for {missing}")
                msg = self._consumer.poll(0.1)
                if msg is None:
                    continue
                tp = (msg.topic(), msg.partition())
                if tp in ends or tp not in starts:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        end = cast(PartitionEnd, msg).offset()
                        ends[tp] = end
                        firsts.setdefault(tp, end)
                    elif err.code() in (KafkaError.UNKNOWN_TOPIC_OR_PART,
                                        KafkaError._UNKNOWN_PARTITION):
                        raise KafkaException(err)
                    continue
                offset = cast(DataMessage, msg).offset()
                firsts.setdefault(tp, offset)
                _, high = self._consumer.get_watermark_offsets(
                    TopicPartition(tp[0], tp[1]), cached=True
                )
                ends[tp] = max(high, offset + 1)
        finally:
            self._consumer.unassign()
        for tp, end in ends.items():
            self._known[tp] = max(end, self._known.get(tp, 0))
        return firsts, ends
