"""Producing Arrow batches of a Kafka-shaped DataFrame, tagged or not, with no loss.

Used by the ``cutover_kafka`` sink and by the tagger. A task returns only after every record it
produced is acknowledged (flush, then the delivery reports are checked), so a batch is never
marked done in the checkpoint with records still in flight: at-least-once, and a replay of the
same batch writes the same bytes to the same partitions.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from cutover.headers import BATCH, EVENT_TIME, KIND, VERSION, WATERMARK
from spark_tagger.kafka_client import cached_producer, drop_producer, topic_partitions
from spark_tagger.options import SinkOptions, Tagging, producer_config
from spark_tagger.partitioner import partition_for

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import KafkaError, Message, Producer

log = logging.getLogger(__name__)

RESERVED = frozenset({VERSION, EVENT_TIME, WATERMARK, BATCH, KIND})


class ProduceError(RuntimeError):
    """Kafka did not acknowledge every record of a task; the batch must not be committed."""


@dataclass
class ProduceStats:
    records: int = 0
    per_partition: dict[str, int] = field(default_factory=dict)
    without_event_time: int = 0
    replaced_headers: int = 0


def _as_bytes(v: Any) -> bytes | None:
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


def tag_headers(tagging: Tagging, event_time: int | None) -> list[tuple[str, bytes]]:
    """The ``bg.*`` headers of one data record (as ``TaggedRecord.to_headers`` writes them).

    A record whose event time is null keeps its other headers and has no ``bg.event_time``: the
    router dead-letters it with the reason, rather than the tagger inventing a time.
    """
    out = [(VERSION, tagging.version.encode())]
    if event_time is not None:
        out.append((EVENT_TIME, str(int(event_time)).encode()))
    if tagging.watermark is not None:
        out.append((WATERMARK, str(tagging.watermark).encode()))
    if tagging.batch is not None:
        out.append((BATCH, str(tagging.batch).encode()))
    return out


def produce_batches(batches: Iterator[pa.RecordBatch], opts: SinkOptions) -> ProduceStats:
    """Produce every row, flush, and raise :class:`ProduceError` unless all were acknowledged."""
    config = producer_config(opts.client)
    try:
        return _produce(batches, opts, cached_producer(config))
    except BaseException:
        drop_producer(config)  # the next attempt starts with a fresh client
        raise


def _produce(batches: Iterator[pa.RecordBatch], opts: SinkOptions,
             producer: Producer) -> ProduceStats:
    partitions: dict[str, int] = {}
    errors: list[str] = []
    stats = ProduceStats()
    tagging = opts.tagging

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    def n_partitions(topic: str) -> int:
        if topic not in partitions:
            partitions[topic] = topic_partitions(producer, topic)
        return partitions[topic]

    for batch in batches:
        names = batch.schema.names
        cols = {n: batch.column(i).to_pylist() for i, n in enumerate(names)}
        keys = cols.get("key")
        values = cols["value"]
        topics = cols.get("topic")
        parts = cols.get("partition")
        headers_col = cols.get("headers")
        times = cols.get(tagging.event_time_column) if tagging is not None else None
        if tagging is not None and times is None:
            raise ProduceError(f"internal: event-time column {tagging.event_time_column!r} "
                               "is missing from the batch")
        for i in range(batch.num_rows):
            key = _as_bytes(keys[i]) if keys is not None else None
            value = _as_bytes(values[i])
            topic = opts.topic or (topics[i] if topics is not None else None)
            if not topic:
                raise ProduceError("a row has no topic (null 'topic' column and no 'topic' option)")
            part = parts[i] if parts is not None else None
            if part is None:
                part = partition_for(key, value, n_partitions(topic))
            hdrs: list[tuple[str, bytes | None]] = []
            if headers_col is not None and headers_col[i]:
                for h in headers_col[i]:
                    if tagging is not None and h["key"] in RESERVED:
                        stats.replaced_headers += 1
                        continue
                    hdrs.append((h["key"], _as_bytes(h["value"])))
            if tagging is not None:
                et = times[i]  # type: ignore[index]
                if et is None:
                    stats.without_event_time += 1
                hdrs.extend(tag_headers(tagging, et))
            while True:
                try:
                    producer.produce(topic, value=value, key=key, partition=part,
                                     headers=hdrs or None, on_delivery=on_delivery)
                    break
                except BufferError:
                    producer.poll(0.05)  # local queue full: let deliveries drain
            producer.poll(0)
            stats.records += 1
            label = f"{topic}:{part}"
            stats.per_partition[label] = stats.per_partition.get(label, 0) + 1
    remaining = producer.flush(opts.flush_timeout_s)
    if remaining:
        raise ProduceError(f"{remaining} records not acknowledged within "
                           f"{opts.flush_timeout_s:.0f}s; the batch will be retried")
    if errors:
        raise ProduceError(f"{len(errors)} records failed: {errors[:3]}")
    if stats.without_event_time:
        log.warning("%d records had a null event time and carry no %s header",
                    stats.without_event_time, EVENT_TIME)
    return stats
