"""A job's own ``foreachBatch`` function under the tagger: its Kafka writes belong to its batch.

The launcher wraps the function. While it runs, a batch Kafka write in it
(``df.write.format("kafka")...save()``, served by :mod:`.batch_writer`) is tagged with the
query's batch: the version, the batch id Spark passed, and the batch's watermark from the
query's checkpoint (``offsets/<batchId>``, read once per call; a replay reads the same file, so
it writes the same bytes). When the function returns, one heartbeat goes to every partition of
each topic the query has written to in this run, acknowledged before the wrapper returns and
Spark commits the batch; a batch in which the function writes nothing still moves the
version's watermark on those topics (the lowest of the job's queries writing a topic, as for
plain sinks).

The event time is computed on the streaming query at start, where its watermark is visible (a
column the launcher adds; the function gets each batch without it), so a function that writes
only ``key`` and ``value`` still has its records' event time.

The batch's scope is per thread: Spark calls each query's function on its own callback thread,
and the function's writes run on that thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from spark_tagger.checkpoint import batch_watermark
from spark_tagger.event_time import EVENT_TIME_COLUMN
from spark_tagger.options import SinkOptions
from spark_tagger.refusal import TaggerError, end_job
from spark_tagger.tagger import (
    TOPIC_WATERMARKS,
    BatchReport,
    QueryRef,
    TagSettings,
    TopicCount,
    say,
    send_heartbeats,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

_local = threading.local()


class BatchScope:
    """One call of a wrapped ``foreachBatch`` function: what its Kafka writes need and did."""

    def __init__(self, owner: TaggedForeachBatch, batch_id: int) -> None:
        self.owner = owner
        self.batch_id = batch_id
        self.sinks: dict[str, SinkOptions] = {}
        self.counts: dict[str, TopicCount] = {}
        self._watermark: tuple[int | None] | None = None

    @property
    def query(self) -> str:
        return self.owner.describe()

    @property
    def output_mode(self) -> str | None:
        mode = self.owner.state.get("outputMode")
        return None if mode is None else str(mode)

    def watermark(self) -> int | None:
        """The batch's watermark, from the query's checkpoint (read once)."""
        if self._watermark is None:
            root = self.owner.query.checkpoint_root()
            self._watermark = (batch_watermark(self.owner.spark, root, self.batch_id),)
        return self._watermark[0]

    def wrote(self, sink: SinkOptions, counts: list[TopicCount]) -> None:
        add_counts(self.sinks, self.counts, sink, counts)


def add_counts(sinks: dict[str, SinkOptions], totals: dict[str, TopicCount],
               sink: SinkOptions, counts: list[TopicCount]) -> None:
    """A batch's Kafka write, added to what the call has written per topic."""
    for c in counts:
        sinks[c.topic] = sink
        before = totals.get(c.topic)
        totals[c.topic] = c if before is None else TopicCount(
            topic=c.topic, records=before.records + c.records,
            without_event_time=before.without_event_time + c.without_event_time)


def current_scope() -> BatchScope | None:
    """The ``foreachBatch`` call running on this thread, if any."""
    scope = getattr(_local, "scope", None)
    return scope if isinstance(scope, BatchScope) else None


class TaggedForeachBatch:
    """The job's function as Spark calls it under the tagger."""

    def __init__(self, func: Callable[[DataFrame, int], Any], spark: SparkSession,
                 settings: TagSettings, state: dict[str, Any]) -> None:
        self.func = func
        self.spark = spark  # the job's session: a batch DataFrame's own session has no streams
        self.settings = settings
        self.state = state  # the writer's recorded settings (output mode, query name)
        self.query = QueryRef()
        self.topics: dict[str, SinkOptions] = {}  # every topic the query has written to
        self.warned_update = False
        self.carried = False  # the launcher added the event-time column to the query

    def describe(self) -> str:
        name = self.state.get("queryName")
        if name:
            return f"query {name!r}"
        if self.query.started:
            return f"query {self.query.query_id()}"
        return "the foreachBatch query"

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        scope = BatchScope(self, batch_id)
        _local.scope = scope
        try:
            self.func(batch_df.drop(EVENT_TIME_COLUMN) if self.carried else batch_df, batch_id)
        except TaggerError as exc:
            end_job(exc, self.spark)
        finally:
            _local.scope = None
        self.topics.update(scope.sinks)
        for topic, sink in sorted(self.topics.items()):
            watermark = scope.watermark()
            shared = TOPIC_WATERMARKS.report(topic, id(self), watermark)
            beats = send_heartbeats(sink, topic, self.settings.version, shared, batch_id)
            count = scope.counts.get(topic)
            say(self.settings, BatchReport(
                version=self.settings.version, batch=batch_id, watermark=watermark,
                records=count.records if count else 0,
                without_event_time=count.without_event_time if count else 0,
                heartbeats=beats, topic=topic, seconds=round(time.monotonic() - started, 3),
                query=self.state.get("queryName")))
