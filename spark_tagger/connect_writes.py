"""Batch Kafka writes on Spark Connect (``df.write.format("kafka")...save()``), tagged.

Two places a Connect job makes them:

* **inside its own ``foreachBatch`` function.** On Connect the function is pickled and run by
  the server's Python (one long-lived worker process per query), so the launcher wraps it
  client-side before it is pickled: :class:`ConnectForeachBatch` travels with it, and on the
  server it installs the tagging ``save`` in that worker process and runs the job's function
  with the batch in scope. Each write there is tagged with the version, the batch id Spark
  passed, the batch's watermark from the query's checkpoint (``offsets/<batchId>``, read
  through the server, once per call) and each record's event time; after the function
  returns, one heartbeat goes to every partition of each topic the query has written, as on a
  classic driver (:mod:`.foreach_batch`). The event time is computed on the streaming query at
  start, where its watermark is visible, carried as a column that the function does not see,
  and found again below what the function wrote (select, filter and the like keep it; an
  aggregation or join inside the function does not, and its write is refused with a sentence);
* **outside any query** (a plain batch write): no micro-batch and no watermark, so the records
  carry the version and the ``--event-time`` the operator passed, and no heartbeat; without
  ``--event-time`` the write is refused.

Save modes are those Spark's Kafka connector accepts (:mod:`.batch_writer`).

Not served on Connect: a ``foreachBatch`` function whose topic another query of the job also
writes. Each query's function runs in its own server-side process, so their heartbeats cannot
carry the lower of the two watermarks; the tagger cannot see such a topic before the first
write, so docs/jobs.md, "Job shapes" says it (plain Kafka sinks sharing a topic are refused at
start).
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_tagger.batch_writer import write_sink
from spark_tagger.checkpoint import parse_offset_log
from spark_tagger.connect_plan import attach_event_time_connect, carried_event_time_connect
from spark_tagger.event_time import EVENT_TIME_COLUMN, EventTimeError
from spark_tagger.foreach_batch import add_counts
from spark_tagger.options import SinkOptions, Tagging
from spark_tagger.refusal import TaggerError
from spark_tagger.tagger import (
    BatchReport,
    TagSettings,
    TopicCount,
    say,
    send_heartbeats,
    write_tagged,
)

if TYPE_CHECKING:
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

_local = threading.local()
_installed: list[bool] = []


def read_batch_watermark(session: Any, checkpoint: str, batch_id: int) -> int | None:
    """The watermark of micro-batch ``batch_id``: its ``offsets`` log entry, read through the
    server (the checkpoint may be on any file system the server reaches)."""
    rows = session.read.text(f"{checkpoint}/offsets/{batch_id}", wholetext=True).collect()
    return parse_offset_log(rows[0][0]).batchWatermarkMs or None


class ConnectScope:
    """One call of a wrapped ``foreachBatch`` function on the server."""

    def __init__(self, owner: ConnectForeachBatch, session: Any, batch_id: int) -> None:
        self.owner = owner
        self.session = session
        self.batch_id = batch_id
        self.sinks: dict[str, SinkOptions] = {}
        self.counts: dict[str, TopicCount] = {}
        self._watermark: tuple[int | None] | None = None

    def watermark(self) -> int | None:
        if self._watermark is None:
            self._watermark = (read_batch_watermark(self.session, self.owner.checkpoint,
                                                    self.batch_id),)
        return self._watermark[0]

    def wrote(self, sink: SinkOptions, counts: list[TopicCount]) -> None:
        add_counts(self.sinks, self.counts, sink, counts)


class ConnectForeachBatch:
    """The job's ``foreachBatch`` function as the Connect server calls it under the tagger
    (pickled with the function; the server's Python imports :mod:`spark_tagger`)."""

    def __init__(self, func: Callable[[Any, int], Any], settings: TagSettings, checkpoint: str,
                 query: str, name: str | None) -> None:
        self.func = func
        self.settings = settings
        self.checkpoint = checkpoint.rstrip("/")
        self.query = query  # as refusals name it
        self.name = name    # the query's name, if the job gave one
        self.topics: dict[str, SinkOptions] = {}  # every topic written by this worker

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        install_server_save()
        started = time.monotonic()
        scope = ConnectScope(self, batch_df.sparkSession, batch_id)
        visible = [c for c in batch_df.columns if c != EVENT_TIME_COLUMN]
        _local.scope = scope
        try:
            self.func(batch_df.select(*visible), batch_id)  # a Project the column is found under
        finally:
            _local.scope = None
        self.topics.update(scope.sinks)
        for topic, sink in sorted(self.topics.items()):
            watermark = scope.watermark()
            beats = send_heartbeats(sink, topic, self.settings.version, watermark, batch_id)
            count = scope.counts.get(topic)
            say(self.settings, BatchReport(
                version=self.settings.version, batch=batch_id, watermark=watermark,
                records=count.records if count else 0,
                without_event_time=count.without_event_time if count else 0,
                heartbeats=beats, topic=topic, seconds=round(time.monotonic() - started, 3),
                query=self.name))


def _writer_frame(writer: Any) -> tuple[ConnectDataFrame, dict[str, Any], str | None]:
    from pyspark.sql.connect.dataframe import DataFrame as CDF

    return CDF(writer._df, writer._spark), dict(writer._write.options), writer._write.mode


def _is_kafka(writer: Any, format: str | None) -> bool:
    source = format or writer._write.source
    return isinstance(source, str) and source.strip().lower() == "kafka"


def save_in_batch(writer: Any, scope: ConnectScope) -> None:
    """A Kafka write inside a wrapped ``foreachBatch`` function, on the server."""
    where = f"the Kafka write in the foreachBatch function of {scope.owner.query}"
    df, options, mode = _writer_frame(writer)
    sink = write_sink(df, options, mode, where)
    try:
        tagged = carried_event_time_connect(df)
    except EventTimeError:
        raise TaggerError(
            f"{where} writes a DataFrame that does not keep the batch's rows (an aggregation "
            "or a join inside the function), so the tagger cannot find each record's event "
            "time; on Spark Connect write a projection or filter of the batch DataFrame, or "
            "do the aggregation in the streaming query") from None
    tagging = Tagging(version=scope.owner.settings.version, batch=scope.batch_id,
                      watermark=scope.watermark(), event_time_column=EVENT_TIME_COLUMN)
    counts = write_tagged(tagged, sink, tagging)
    if not counts and sink.topic is not None:  # an empty batch has no task to count it
        counts = [TopicCount(topic=sink.topic, records=0, without_event_time=0)]
    scope.wrote(sink, counts)


def save_plain(writer: Any, settings: TagSettings) -> None:
    """A Kafka batch write outside any streaming query, from the client."""
    where = "a batch Kafka write outside any streaming query's foreachBatch"
    df, options, mode = _writer_frame(writer)
    sink = write_sink(df, options, mode, where)
    if settings.event_time is None:
        raise TaggerError(f"{where} has no watermark to take its records' event time from; "
                          "pass --event-time COLUMN|EXPR (a timestamp or epoch-ms column)")
    try:
        tagged, _ = attach_event_time_connect(df, settings.event_time)
    except EventTimeError as exc:
        raise TaggerError(f"{where}: {exc}") from None
    counts = write_tagged(tagged, sink, Tagging(version=settings.version,
                                                event_time_column=EVENT_TIME_COLUMN))
    if not settings.quiet:
        for c in counts:
            print(f"cutover tag: batch write of {c.records} records to {c.topic} tagged (no "
                  "micro-batch: no watermark, no heartbeat)", file=sys.stderr, flush=True)


def install_server_save() -> None:
    """In the server's foreachBatch worker: Kafka writes made in a wrapped function are tagged
    (once per process)."""
    if _installed:
        return
    from pyspark.sql.connect.readwriter import DataFrameWriter

    original = DataFrameWriter.save

    def save(self: Any, path: str | None = None, format: str | None = None,
             mode: str | None = None, partitionBy: Any = None, **options: Any) -> Any:
        if _is_kafka(self, format):
            self.mode(mode).options(**options)
            scope = getattr(_local, "scope", None)
            if scope is None:
                raise TaggerError("a Kafka write in the Spark Connect server's Python outside "
                                  "the foreachBatch function's own thread cannot be tied to "
                                  "its batch; write from the function itself")
            return save_in_batch(self, scope)
        return original(self, path, format, mode, partitionBy, **options)

    DataFrameWriter.save = save  # type: ignore[method-assign]
    _installed.append(True)


def client_save(original: Callable[..., Any], settings: TagSettings) -> Callable[..., Any]:
    """The client's ``DataFrameWriter.save``: Kafka writes tagged, others untouched."""

    def save(self: Any, path: str | None = None, format: str | None = None,
             mode: str | None = None, partitionBy: Any = None, **options: Any) -> Any:
        if _is_kafka(self, format):
            self.mode(mode).options(**options)
            return save_plain(self, settings)
        return original(self, path, format, mode, partitionBy, **options)

    return save
