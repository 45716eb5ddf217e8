"""One Spark task's read: offsets ``[start, end)`` of one partition, as Arrow batches.

The rule this module holds is when an "offset out of range" is data loss, and what the error
then says. librdkafka's word alone is not enough: with ``auto.offset.reset=error`` its
``_AUTO_OFFSET_RESET`` error is queued without a fetch version, so it outlives the assignment it
was about and reaches the next task that reuses the cached consumer (reproduced against Apache
Kafka 4: an error for offset 40 of a partition, left unread, came back after the partition was
assigned again at offset 0). Spark's own connector does not take the error's word either: it
asks the broker for the partition's earliest and latest offsets. Here (through the planner's
``EndOffsetProbe``, whose Fetch answers are right where ListOffsets is not) an out-of-range error
counts only when it is about this partition at the offset the task is waiting for, and it is data
loss only when the broker says that offset is gone: below the partition's start (retention,
deleted records; the error names the new start) or past its end although the plan saw it
(truncation). Otherwise the partition is assigned again at that offset and the read goes on,
under the same ``kafkaConsumer.pollTimeoutMs`` that bounds waiting for a record.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, cast

from pyspark.sql.datasource import InputPartition
from pyspark.sql.types import StructType

from spark_tagger.kafka_client import GROUP_ONLY_ERRORS, EndOffsetProbe, cached_consumer
from spark_tagger.options import SourceOptions, consumer_config

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import KafkaError, Message

    from cutover.kafka_types import DataMessage

log = logging.getLogger(__name__)

EARLIEST = -2
_TS_TYPE = {1: 0, 2: 1}  # confluent CREATE_TIME/LOG_APPEND_TIME -> Spark's 0/1; else -1
RETRY_PAUSE_S = 0.2


class KafkaRange(InputPartition):
    """One Spark task: offsets ``[start, end)`` of one topic partition (start -2 = earliest)."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


class DataLossError(RuntimeError):
    """Offsets the task must read are no longer in the partition (``failOnDataLoss=true``)."""


class ReadTimeoutError(TimeoutError):
    """No record at the awaited offset within ``kafkaConsumer.pollTimeoutMs``."""


def read_range(opts: SourceOptions, schema: StructType, rng: KafkaRange,
               rows_per_batch: int = 10_000) -> Iterator[pa.RecordBatch]:
    """Records ``[start, end)`` of one partition as Arrow batches of Spark's Kafka schema."""
    import pyarrow as pa
    from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, TopicPartition
    from pyspark.sql.pandas.types import to_arrow_schema

    arrow_schema = to_arrow_schema(schema, timezone="UTC")
    consumer = cached_consumer(consumer_config(opts.client, opts.fail_on_data_loss))
    start = OFFSET_BEGINNING if rng.start == EARLIEST else rng.start
    consumer.assign([TopicPartition(rng.topic, rng.partition, start)])
    cols: dict[str, list[Any]] = {f.name: [] for f in schema.fields}
    want_headers = "headers" in cols

    def flush() -> pa.RecordBatch:
        batch = pa.RecordBatch.from_arrays(
            [pa.array(cols[f.name], type=arrow_schema.field(f.name).type) for f in schema.fields],
            schema=arrow_schema,
        )
        for values in cols.values():
            values.clear()
        return batch

    timeout = opts.poll_timeout_ms / 1000.0
    last_progress = time.monotonic()
    position = rng.start
    try:
        while position < rng.end:
            msgs = consumer.consume(num_messages=min(5000, max(1, rng.end - max(position, 0))),
                                    timeout=0.5)
            if not msgs:
                if time.monotonic() - last_progress > timeout:
                    raise ReadTimeoutError(
                        f"{rng.topic}:{rng.partition}: no record at offset {position} within "
                        f"{timeout:.0f}s (range ends at {rng.end}); see kafkaConsumer.pollTimeoutMs"
                    )
                continue
            for msg in msgs:
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    if err.code() in (KafkaError._AUTO_OFFSET_RESET,
                                      KafkaError.OFFSET_OUT_OF_RANGE):
                        if opts.fail_on_data_loss and _out_of_range_here(msg, rng, position):
                            _check_still_there(opts, rng, position, err,
                                               time.monotonic() - last_progress > timeout)
                            time.sleep(RETRY_PAUSE_S)
                            consumer.assign([TopicPartition(rng.topic, rng.partition,
                                                            max(position, start))])
                        continue
                    if err.code() in GROUP_ONLY_ERRORS:
                        continue  # the reader joins no group and commits nothing
                    if err.fatal() or not err.retriable():
                        raise KafkaException(err)
                    continue
                if TYPE_CHECKING:  # a record (cutover.kafka_types); a cast costs a call
                    msg = cast(DataMessage, msg)
                offset = msg.offset()
                if msg.partition() != rng.partition or msg.topic() != rng.topic or \
                        offset < position:
                    continue  # not ours (a reused client's leftovers), or read already
                last_progress = time.monotonic()
                if offset >= rng.end:
                    position = rng.end
                    break
                position = offset + 1
                ts_type, ts = msg.timestamp()
                cols["key"].append(msg.key())
                cols["value"].append(msg.value())
                cols["topic"].append(msg.topic())
                cols["partition"].append(msg.partition())
                cols["offset"].append(offset)
                cols["timestamp"].append(ts * 1000 if ts_type else None)
                cols["timestampType"].append(_TS_TYPE.get(ts_type, -1))
                if want_headers:
                    hs = msg.headers()
                    cols["headers"].append(
                        [{"key": k, "value": v} for k, v in hs] if hs else None
                    )
                if len(cols["offset"]) >= rows_per_batch:
                    yield flush()
        if cols["offset"]:
            yield flush()
    finally:
        consumer.unassign()


def _out_of_range_here(msg: Message, rng: KafkaRange, position: int) -> bool:
    """Whether an out-of-range error is about the offset this task waits for (else a leftover
    of an earlier assignment of the reused consumer)."""
    if msg.topic() != rng.topic or msg.partition() != rng.partition:
        return False
    return position < 0 or msg.offset() == position


def _check_still_there(opts: SourceOptions, rng: KafkaRange, position: int,
                       err: KafkaError, waited_too_long: bool) -> None:
    """Raise :class:`DataLossError` when the broker says ``position`` is gone, and
    :class:`ReadTimeoutError` when it keeps refusing an offset it holds past the poll timeout;
    return when the offset is still in the partition (the caller assigns it again). The
    partition's offsets come from the planner's probe (Fetch answers, right on every broker)."""
    from confluent_kafka import KafkaException

    tp = (rng.topic, rng.partition)
    probe = EndOffsetProbe(consumer_config(opts.client, False))
    try:
        begins, ends = probe.begins_and_ends([tp], timeout=10)
        low, high = begins[tp], ends[tp]
    except (KafkaException, TimeoutError) as exc:
        log.warning("%s:%d: out of range at offset %d (%s) and the partition's offsets could "
                    "not be read (%s); trying again", rng.topic, rng.partition, position,
                    err.str(), exc)
        return
    finally:
        probe.close()
    if position >= 0 and position < low:
        raise DataLossError(
            f"{rng.topic}:{rng.partition}: offset {position} is no longer available: the "
            f"partition now starts at {low} (data lost to retention or deleted); set "
            "failOnDataLoss=false to skip ahead")
    if position >= high:
        raise DataLossError(
            f"{rng.topic}:{rng.partition}: offset {position} is no longer available: the "
            f"partition now ends at {high} although this batch was planned up to {rng.end} "
            "(log truncated after a leader change?); set failOnDataLoss=false to skip ahead")
    if waited_too_long:
        raise ReadTimeoutError(
            f"{rng.topic}:{rng.partition}: the broker kept answering 'out of range' for offset "
            f"{position} for {opts.poll_timeout_ms / 1000:.0f}s while holding offsets {low} to "
            f"{high} ({err.str()}); see kafkaConsumer.pollTimeoutMs")
    log.warning("%s:%d: the broker answered 'out of range' for offset %d (%s) but holds "
                "offsets %d to %d; reading it again", rng.topic, rng.partition, position,
                err.str(), low, high)
