"""A job's batch Kafka writes (``df.write.format("kafka")...save()``) under the tagger.

Whichever connector the job has (Spark's own or none), the tagger does the write itself, so
nothing reaches Kafka untagged:

* inside a streaming query's ``foreachBatch`` function the rows are tagged with that query's
  batch (:mod:`.foreach_batch`): version, event time (the DataFrame's watermarked column, a
  window's end, or ``--event-time``), the batch's watermark and id; heartbeats follow when the
  function returns;
* anywhere else (a plain batch write) there is no micro-batch and no watermark: the rows carry
  the version and the ``--event-time`` the operator passed, and no heartbeat is sent.

Save modes are those Spark's Kafka connector accepts: ``append`` and ``errorifexists`` (the
default; Kafka has no table to exist, so both append). ``overwrite`` and ``ignore`` are refused
as the connector refuses them.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

from spark_tagger.client_security import KafkaOptionError
from spark_tagger.event_time import EVENT_TIME_COLUMN, EventTimeError, attach_event_time
from spark_tagger.foreach_batch import BatchScope, current_scope
from spark_tagger.options import SinkOptions, Tagging
from spark_tagger.output_modes import UPDATE_WARNING
from spark_tagger.refusal import TaggerError
from spark_tagger.sink_schema import check_sink_schema
from spark_tagger.tagger import TagSettings, write_tagged

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

ACCEPTED_MODES = frozenset({"append", "error", "errorifexists", "default"})


def _where(scope: BatchScope | None) -> str:
    if scope is None:
        return "a batch Kafka write outside any streaming query's foreachBatch"
    return f"the Kafka write in the foreachBatch function of {scope.query}"


def write_sink(df: Any, options: dict[str, Any], mode: str | None, where: str) -> SinkOptions:
    """The sink of a batch Kafka write (classic or Spark Connect), after the checks Spark's
    connector makes: its save mode, its options, ``df``'s columns."""
    if mode is not None and mode.strip().lower() not in ACCEPTED_MODES:
        raise TaggerError(f"{where} uses save mode {mode!r}, which Spark's Kafka connector "
                          "does not allow either; use mode('append') or leave the default")
    text = {str(k): ("" if v is None else str(v)) for k, v in options.items()}
    try:
        sink = SinkOptions.from_options(text)
        check_sink_schema(df.schema, sink)
    except (KafkaOptionError, ValueError) as exc:
        raise TaggerError(f"{where}: {exc}") from None
    return sink


def save_tagged(df: DataFrame, options: dict[str, Any], mode: str | None,
                settings: TagSettings) -> None:
    """Write ``df`` to Kafka with every record tagged; :class:`TaggerError` if it can't be."""
    scope = current_scope()
    where = _where(scope)
    sink = write_sink(df, options, mode, where)
    if scope is not None:
        _check_stream_mode(scope, settings)
    elif settings.event_time is None:
        raise TaggerError(f"{where} has no watermark to take its records' event time from; "
                          "pass --event-time COLUMN|EXPR (a timestamp or epoch-ms column)")
    try:
        tagged, _found = attach_event_time(df, settings.event_time)
    except EventTimeError as exc:
        raise TaggerError(f"{where}: {exc}") from None
    if scope is None:
        tagging = Tagging(version=settings.version, event_time_column=EVENT_TIME_COLUMN)
        counts = write_tagged(tagged, sink, tagging)
        if not settings.quiet:
            for c in counts:
                print(f"cutover tag: batch write of {c.records} records to {c.topic} tagged "
                      "(no micro-batch: no watermark, no heartbeat)", file=sys.stderr,
                      flush=True)
        return
    tagging = Tagging(version=settings.version, batch=scope.batch_id,
                      watermark=scope.watermark(), event_time_column=EVENT_TIME_COLUMN)
    scope.wrote(sink, write_tagged(tagged, sink, tagging))


def _check_stream_mode(scope: BatchScope, settings: TagSettings) -> None:
    mode = (scope.output_mode or "append").strip().lower()
    if mode == "complete":
        raise TaggerError(
            f"{scope.query} uses complete output mode, which re-emits the whole result every "
            "batch, so the Kafka write in its foreachBatch function has no event time the "
            "router can route by; use append or update output mode"
        )
    if mode == "update" and not scope.owner.warned_update and not settings.quiet:
        scope.owner.warned_update = True
        print(f"cutover tag: warning: {UPDATE_WARNING.format(query=scope.query)}",
              file=sys.stderr, flush=True)
