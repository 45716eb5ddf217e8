"""A plain reader of topics for the tests: every record up to the current end, bytes untouched
(for byte-identical comparisons)."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition
from pydantic import BaseModel, ConfigDict

from testground.brokers import end_offsets


class RawRecord(BaseModel):
    """A record as read back from a topic, bytes untouched (for byte-identical comparisons)."""

    model_config = ConfigDict(frozen=True)

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None  # the broker's record timestamp, ms (not part of `content`)

    def header(self, name: str) -> str | None:
        for k, v in self.headers:
            if k == name:
                return None if v is None else v.decode()
        return None

    @property
    def content(self) -> tuple[Any, ...]:
        """Everything but the offset: equal for a record and its replayed duplicate."""
        return (self.partition, self.key, self.value, self.headers)


def read_topic(bootstrap: str, topic: str, timeout: float = 60.0,
               ends: dict[int, int] | None = None) -> list[RawRecord]:
    """Every record of ``topic`` up to its current end offsets, in (partition, offset) order."""
    ends = ends if ends is not None else end_offsets(bootstrap, topic)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cutover-read-topic",
                         "enable.auto.commit": False, "enable.partition.eof": True,
                         "auto.offset.reset": "earliest"})
    out: list[RawRecord] = []
    try:
        todo = {p for p, e in ends.items() if e > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in sorted(todo)])
        deadline = time.monotonic() + timeout
        while todo:
            if time.monotonic() > deadline:
                raise TimeoutError(f"reading {topic}: partitions {sorted(todo)} not read to end")
            for msg in consumer.consume(1000, 0.5):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(f"reading {topic}: {err}")
                    if msg.offset() >= ends[msg.partition()]:
                        todo.discard(msg.partition())
                    continue
                p = msg.partition()
                if msg.offset() < ends[p]:
                    out.append(RawRecord(topic=topic, partition=p, offset=msg.offset(),
                                         key=msg.key(), value=msg.value(),
                                         headers=tuple(msg.headers() or ()),
                                         timestamp=msg.timestamp()[1]))
                if msg.offset() + 1 >= ends[p]:
                    todo.discard(p)
    finally:
        consumer.close()
    out.sort(key=lambda r: (r.partition, r.offset))
    return out
