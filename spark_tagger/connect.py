"""Jobs on Spark Connect (``SparkSession.builder.remote(...)``): their Kafka sinks, tagged.

On Connect the job's process is a client: each query is a plan sent to the Connect server, and
its ``foreachBatch`` function is pickled and run by the server's Python. So a
``writeStream.format("kafka")`` query is started the same way as on a classic driver, as a
plan: the event-time column is added to the client's plan (found from the schemas the server
reports, which carry Spark's watermark marks), the Kafka sink becomes ``foreachBatch`` with
:class:`ConnectBatchTagger`, and every other setting of the query (options, checkpoint,
trigger, output mode, name) is left as the job set it. The tagger object is plain data; the
server's Python imports :mod:`spark_tagger` to run it (docs/jobs.md, "On a cluster" says how
to ship it), reads
the batch's watermark from the checkpoint through the server, and produces from the server's
executors as on a classic driver.

A job's own ``foreachBatch`` function is wrapped before it is pickled, and its batch Kafka
writes are tagged on the server; a batch Kafka write outside any query is tagged from the
client (:mod:`.connect_writes`).

Refused at start on Connect, naming the query: two Kafka sinks writing one topic (each
query's tagger runs in its own server-side process, so heartbeats cannot carry the lower of
their watermarks, see :class:`.tagger.SharedTopicWatermarks`), and a ``foreachBatch`` query
without a checkpoint location (its batches' watermarks are read from it).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

from spark_tagger.connect_plan import attach_event_time_connect
from spark_tagger.connect_writes import ConnectForeachBatch, client_save, read_batch_watermark
from spark_tagger.event_time import EVENT_TIME_COLUMN, EventTimeError
from spark_tagger.options import SinkOptions, Tagging
from spark_tagger.output_modes import check_output_mode
from spark_tagger.refusal import TaggerError
from spark_tagger.tagger import BatchReport, TagSettings, say, send_heartbeats, write_tagged

if TYPE_CHECKING:
    pass

_TOPICS: set[str] = set()  # the topics this job's Connect queries write


class ConnectBatchTagger:
    """The ``foreachBatch`` function of a tagged query on Connect (pickled to the server)."""

    def __init__(self, settings: TagSettings, sink: SinkOptions, checkpoint: str) -> None:
        assert sink.topic is not None
        self.settings = settings
        self.sink = sink
        self.topic: str = sink.topic
        self.checkpoint = checkpoint.rstrip("/")

    def watermark(self, batch_df: Any, batch_id: int) -> int | None:
        """The batch's watermark from ``offsets/<batch_id>``, read through the server."""
        return read_batch_watermark(batch_df.sparkSession, self.checkpoint, batch_id)

    def __call__(self, batch_df: Any, batch_id: int) -> None:
        started = time.monotonic()
        watermark = self.watermark(batch_df, batch_id)
        tagging = Tagging(version=self.settings.version, batch=batch_id, watermark=watermark,
                          event_time_column=EVENT_TIME_COLUMN)
        counts = write_tagged(batch_df, self.sink, tagging)
        beats = send_heartbeats(self.sink, self.topic, self.settings.version, watermark,
                                batch_id)
        say(self.settings, BatchReport(
            version=self.settings.version, batch=batch_id, watermark=watermark,
            records=sum(c.records for c in counts),
            without_event_time=sum(c.without_event_time for c in counts), heartbeats=beats,
            topic=self.topic, seconds=round(time.monotonic() - started, 3)))


def _query(proto: Any, fallback: str) -> str:
    return f"query {proto.query_name!r}" if proto.query_name else fallback


def start_connect(writer: Any, settings: TagSettings) -> None:
    """Before a Connect query starts: tag a Kafka sink in place, refuse what can't be tagged."""
    proto = writer._write_proto
    if proto.HasField("foreach_batch"):
        _wrap_foreach_batch(writer, settings)
        return
    if proto.format.strip().lower() != "kafka":
        return
    options = dict(proto.options)
    try:
        sink = SinkOptions.from_options(options)
    except ValueError as exc:
        raise TaggerError(f"the job's Kafka sink: {exc}") from None
    if sink.topic is None:
        raise TaggerError("the job's Kafka sink has no .option('topic', ...); the tagger needs "
                          "one output topic per query to send heartbeats to every partition")
    query = _query(proto, f"the query writing to topic {sink.topic!r}")
    if sink.topic in _TOPICS:
        raise TaggerError(
            f"{query} writes to topic {sink.topic!r}, which another query of the job writes "
            "too; on Spark Connect each query's tagger runs in its own server-side process, "
            "so their heartbeats cannot carry the lower of the two watermarks: give each query "
            "its own topic")
    checkpoint = _checked_query(proto, query, settings)
    what = _carry_event_time(writer, settings, None)
    proto.ClearField("format")
    writer.foreachBatch(ConnectBatchTagger(settings, sink, checkpoint))  # pickled as data
    _TOPICS.add(sink.topic)
    if not settings.quiet:
        print(f"cutover tag: version {settings.version} -> topic {sink.topic}; event time: "
              f"{what} (Spark Connect)", file=sys.stderr, flush=True)


def _checked_query(proto: Any, query: str, settings: TagSettings) -> str:
    """What every tagged Connect query needs: a checkpoint (each batch's watermark is read
    from it), an output mode with event times, micro-batches. Returns the checkpoint."""
    checkpoint = dict(proto.options).get("checkpointLocation")
    if not checkpoint:
        raise TaggerError(f"{query} has no checkpointLocation option; on Spark Connect the "
                          "tagger reads each batch's watermark from the query's checkpoint, so "
                          "set .option('checkpointLocation', ...)")
    check_output_mode(proto.output_mode or None, query, settings.quiet)
    if proto.HasField("continuous_checkpoint_interval"):
        raise TaggerError("continuous triggers are not supported by the tagger (it works per "
                          "micro-batch); use processingTime or availableNow")
    return str(checkpoint)


def _carry_event_time(writer: Any, settings: TagSettings, query: str | None) -> str:
    """Add the event-time column to the query's plan; what it was found from. ``query``
    prefixes a refusal's sentence."""
    from pyspark.sql.connect.dataframe import DataFrame as CDF

    df = CDF(writer._write_stream._child, writer._session)
    try:
        tagged, what = attach_event_time_connect(df, settings.event_time)
    except EventTimeError as exc:
        raise TaggerError(str(exc) if query is None else f"{query}: {exc}") from None
    writer._write_stream._child = tagged._plan
    return what


def _wrap_foreach_batch(writer: Any, settings: TagSettings) -> None:
    """A ``foreachBatch`` query: its function, wrapped, goes to the server instead."""
    proto = writer._write_proto
    query = _query(proto, "the foreachBatch query")
    func = getattr(writer, "_cutover_func", None)
    if func is None or isinstance(func, ConnectForeachBatch):
        raise TaggerError(f"{query}: its foreachBatch function was set in a way the tagger "
                          "did not see; set it with writeStream.foreachBatch(function)")
    checkpoint = _checked_query(proto, query, settings)
    what = _carry_event_time(writer, settings, query)
    writer.foreachBatch(ConnectForeachBatch(func, settings, checkpoint, query,
                                            proto.query_name or None))
    if not settings.quiet:
        print(f"cutover tag: version {settings.version} -> the Kafka writes of {query}'s "
              f"foreachBatch function; event time: {what} (Spark Connect)", file=sys.stderr,
              flush=True)


def install_connect(settings: TagSettings, patch: Any) -> bool:
    """Patch Connect's writers (when PySpark's Connect client is installed)."""
    try:
        from pyspark.sql.connect.readwriter import DataFrameWriter
        from pyspark.sql.connect.streaming.readwriter import DataStreamWriter
    except ImportError:
        return False
    original_start = DataStreamWriter._start_internal

    def start_internal(self: Any, path: str | None = None, tableName: str | None = None,
                       format: str | None = None, outputMode: str | None = None,
                       partitionBy: Any = None, queryName: str | None = None,
                       **options: Any) -> Any:
        # what start() was given goes into the query's settings first, as Spark's own does
        self.options(**options)
        for setter, value in (("format", format), ("outputMode", outputMode),
                              ("queryName", queryName)):
            if value is not None:
                getattr(self, setter)(value)
        start_connect(self, settings)
        return original_start(self, path=path, tableName=tableName, partitionBy=partitionBy)

    original_foreach_batch = DataStreamWriter.foreachBatch

    def foreach_batch(self: Any, func: Any) -> Any:
        self._cutover_func = func  # wrapped at start, once the query's settings are known
        return original_foreach_batch(self, func)

    patch(DataStreamWriter, "_start_internal", start_internal)
    patch(DataStreamWriter, "foreachBatch", foreach_batch)
    patch(DataFrameWriter, "save", client_save(DataFrameWriter.save, settings))
    return True
