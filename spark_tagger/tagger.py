"""The tagging sink: what a job's ``writeStream.format("kafka")`` becomes under ``cutover tag``.

Each micro-batch goes through ``foreachBatch``: the batch's exact watermark is read from the
checkpoint (``offsets/<batchId>``), executors produce every record with its ``bg.*`` headers
and flush, then the driver writes one heartbeat to every partition of the output topic and
flushes. Only then does the function return and Spark commit the batch. A crash anywhere before
that replays the batch with the same offsets and watermark: same bytes, same partitions.
"""

from __future__ import annotations

import functools
import logging
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from cutover.headers import VERSION_PATTERN, heartbeat_headers
from spark_tagger.checkpoint import batch_watermark
from spark_tagger.event_time import EVENT_TIME_COLUMN
from spark_tagger.kafka_client import cached_producer, topic_partitions
from spark_tagger.options import SinkOptions, Tagging, producer_config
from spark_tagger.produce import ProduceError, produce_batches

if TYPE_CHECKING:
    import pyarrow as pa
    from confluent_kafka import KafkaError, Message
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


class TagSettings(BaseModel):
    """What ``cutover tag`` was asked to do (validated flags)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    version: str = Field(pattern=VERSION_PATTERN)
    event_time: str | None = None
    kafka_source: str = Field(default="auto", pattern=r"^(auto|python|jvm)$")
    quiet: bool = False


class BatchReport(BaseModel):
    """One line per micro-batch on the launcher's stderr (JSON), for operators and tests."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    event: str = "batch"
    version: str
    batch: int
    watermark: int | None
    records: int
    without_event_time: int
    heartbeats: int
    topic: str
    seconds: float
    query: str | None = None  # a foreachBatch query's name, when it has one


class TopicCount(BaseModel):
    """What the tasks of one tagged write produced to one topic."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    topic: str
    records: int
    without_event_time: int


def _write_task(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: produce this task's rows, flush, report counts per topic."""
    import pyarrow as pa

    stats = produce_batches(batches, opts)
    per_topic: dict[str, int] = {}
    for label, n in stats.per_partition.items():
        topic = label.rsplit(":", 1)[0]
        per_topic[topic] = per_topic.get(topic, 0) + n
    topics = sorted(per_topic)
    # rows without an event time are counted once, on the task's first topic
    missing = [stats.without_event_time if i == 0 else 0 for i in range(len(topics))]
    yield pa.RecordBatch.from_pydict(
        {"topic": topics, "records": [per_topic[t] for t in topics],
         "without_event_time": missing},
        schema=pa.schema([("topic", pa.string()), ("records", pa.int64()),
                          ("without_event_time", pa.int64())]),
    )


def write_tagged(df: DataFrame, sink: SinkOptions, tagging: Tagging) -> list[TopicCount]:
    """Produce every row of ``df`` (which has the event-time column) with its ``bg.*`` headers.

    Returns once every task's records are acknowledged, with what went to each topic.
    """
    opts = sink.model_copy(update={"tagging": tagging})
    rows = df.mapInArrow(
        functools.partial(_write_task, opts),
        "topic STRING, records LONG, without_event_time LONG",
    ).collect()
    totals: dict[str, tuple[int, int]] = {}
    for r in rows:
        records, missing = totals.get(r["topic"], (0, 0))
        totals[r["topic"]] = (records + r["records"], missing + r["without_event_time"])
    return [TopicCount(topic=t, records=n, without_event_time=m)
            for t, (n, m) in sorted(totals.items())]


def send_heartbeats(sink: SinkOptions, topic: str, version: str, watermark: int | None,
                    batch_id: int) -> int:
    """One heartbeat per partition of ``topic``, acknowledged before returning."""
    producer = cached_producer(producer_config(sink.client))
    count = topic_partitions(producer, topic)
    headers = heartbeat_headers(version, watermark, batch_id)
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(f"{msg.partition()}: {err}")

    for p in range(count):
        producer.produce(topic, value=b"", partition=p, headers=headers,
                         on_delivery=on_delivery)
    remaining = producer.flush(sink.flush_timeout_s)
    if remaining or errors:
        raise ProduceError(f"heartbeats of batch {batch_id} to {topic} not acknowledged"
                           f" ({remaining} pending, errors {errors[:3]})")
    return count


def say(settings: TagSettings, report: BatchReport) -> None:
    """The per-batch line on stderr, unless ``--quiet``."""
    if not settings.quiet:  # one write: on Spark Connect the server's Python shares the stream
        sys.stderr.write(f"cutover tag: {report.model_dump_json()}\n")
        sys.stderr.flush()


class SharedTopicWatermarks:
    """The watermark a heartbeat on a topic may carry when several queries of the job write it.

    The router takes a version's watermark on a partition from the highest heartbeat it has
    seen, as "nothing more below it will come". Each query has its own watermark, so on a topic
    that two queries write, a heartbeat carrying the faster query's would promise what the
    slower one may still break. A heartbeat therefore carries the lowest watermark among the
    job's queries known to write that topic (none while one of them has none yet). Data
    records keep their own query's watermark.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_topic: dict[str, dict[int, int | None]] = {}

    def join(self, topic: str, query: int) -> None:
        """``query`` writes ``topic`` from now on (it has no watermark there yet)."""
        with self._lock:
            self._by_topic.setdefault(topic, {}).setdefault(query, None)

    def report(self, topic: str, query: int, watermark: int | None) -> int | None:
        """Record ``query``'s batch watermark; the watermark its heartbeats on ``topic`` carry."""
        with self._lock:
            queries = self._by_topic.setdefault(topic, {})
            queries[query] = watermark
            values = list(queries.values())
        if any(v is None for v in values):
            return None
        return min(v for v in values if v is not None)


TOPIC_WATERMARKS = SharedTopicWatermarks()


class QueryRef:
    """The started query, handed to the batch function (which may run before start returns)."""

    def __init__(self) -> None:
        self._query: StreamingQuery | None = None
        self._ready = threading.Event()

    @property
    def started(self) -> bool:
        return self._ready.is_set()

    def set(self, query: StreamingQuery) -> None:
        self._query = query
        self._ready.set()

    def query_id(self) -> str:
        assert self._query is not None
        return str(self._query.id)

    def checkpoint_root(self, timeout: float = 300.0) -> str:
        if not self._ready.wait(timeout):
            raise RuntimeError("the streaming query did not report its start")
        assert self._query is not None
        jsq = self._query._jsq
        return str(jsq.streamingQuery().resolvedCheckpointRoot())


class BatchTagger:
    """The ``foreachBatch`` function of a tagged query."""

    def __init__(self, spark: SparkSession, settings: TagSettings, sink: SinkOptions) -> None:
        assert sink.topic is not None
        self.spark = spark  # the outer session: batch_df's own session has no streams
        self.settings = settings
        self.sink = sink
        self.topic: str = sink.topic
        self.query = QueryRef()
        TOPIC_WATERMARKS.join(self.topic, id(self))

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        watermark = batch_watermark(self.spark, self.query.checkpoint_root(), batch_id)
        tagging = Tagging(version=self.settings.version, batch=batch_id, watermark=watermark,
                          event_time_column=EVENT_TIME_COLUMN)
        counts = write_tagged(batch_df, self.sink, tagging)
        shared = TOPIC_WATERMARKS.report(self.topic, id(self), watermark)
        beats = send_heartbeats(self.sink, self.topic, self.settings.version, shared, batch_id)
        say(self.settings, BatchReport(
            version=self.settings.version, batch=batch_id, watermark=watermark,
            records=sum(c.records for c in counts),
            without_event_time=sum(c.without_event_time for c in counts), heartbeats=beats,
            topic=self.topic, seconds=round(time.monotonic() - started, 3)))
