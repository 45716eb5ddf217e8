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
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from cutover.headers import VERSION_PATTERN, heartbeat_headers
from spark_tagger.checkpoint import batch_watermark
from spark_tagger.event_time import EVENT_TIME_COLUMN
from spark_tagger.kafka_client import cached_producer, topic_partitions
from spark_tagger.options import SinkOptions, Tagging, producer_config
from spark_tagger.produce import ProduceError, produce_batches

if TYPE_CHECKING:
    import pyarrow as pa
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


def _write_task(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Executor side: produce this task's rows, flush, report counts as one row."""
    import pyarrow as pa

    stats = produce_batches(batches, opts)
    yield pa.RecordBatch.from_pydict(
        {"records": [stats.records], "without_event_time": [stats.without_event_time]},
        schema=pa.schema([("records", pa.int64()), ("without_event_time", pa.int64())]),
    )


class _QueryRef:
    """The started query, handed to the batch function (which may run before start returns)."""

    def __init__(self) -> None:
        self._query: StreamingQuery | None = None
        self._ready = threading.Event()

    def set(self, query: StreamingQuery) -> None:
        self._query = query
        self._ready.set()

    def checkpoint_root(self, timeout: float = 300.0) -> str:
        if not self._ready.wait(timeout):
            raise RuntimeError("the streaming query did not report its start")
        assert self._query is not None
        jsq = self._query._jsq  # type: ignore[attr-defined]
        return str(jsq.streamingQuery().resolvedCheckpointRoot())


class BatchTagger:
    """The ``foreachBatch`` function of a tagged query."""

    def __init__(self, spark: SparkSession, settings: TagSettings, sink: SinkOptions) -> None:
        assert sink.topic is not None
        self.spark = spark  # the outer session: batch_df's own session has no streams
        self.settings = settings
        self.sink = sink
        self.topic: str = sink.topic
        self.query = _QueryRef()

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        watermark = batch_watermark(self.spark, self.query.checkpoint_root(), batch_id)
        tagging = Tagging(version=self.settings.version, batch=batch_id, watermark=watermark,
                          event_time_column=EVENT_TIME_COLUMN)
        opts = self.sink.model_copy(update={"tagging": tagging})
        rows = batch_df.mapInArrow(
            functools.partial(_write_task, opts), "records LONG, without_event_time LONG"
        ).collect()
        records = sum(r["records"] for r in rows)
        missing = sum(r["without_event_time"] for r in rows)
        beats = self.heartbeat(batch_id, watermark)
        report = BatchReport(version=self.settings.version, batch=batch_id, watermark=watermark,
                             records=records, without_event_time=missing, heartbeats=beats,
                             topic=self.topic, seconds=round(time.monotonic() - started, 3))
        if not self.settings.quiet:
            print(f"cutover tag: {report.model_dump_json()}", file=sys.stderr, flush=True)

    def heartbeat(self, batch_id: int, watermark: int | None) -> int:
        """One heartbeat per partition of the output topic, acknowledged before returning."""
        producer = cached_producer(producer_config(self.sink.client))
        count = topic_partitions(producer, self.topic)
        headers = heartbeat_headers(self.settings.version, watermark, batch_id)
        errors: list[str] = []

        def on_delivery(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(f"{msg.partition()}: {err}")

        for p in range(count):
            producer.produce(self.topic, value=b"", partition=p, headers=headers,
                             on_delivery=on_delivery)
        remaining = producer.flush(self.sink.flush_timeout_s)
        if remaining or errors:
            raise ProduceError(f"heartbeats of batch {batch_id} to {self.topic} not acknowledged"
                               f" ({remaining} pending, errors {errors[:3]})")
        return count
