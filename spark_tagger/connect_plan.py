"""The event-time column on a Spark Connect client plan.

On Connect the job's DataFrames are plans built on the client; the server reports their
schemas, which carry Spark's watermark marks. The tagger finds the event time there (or from
``--event-time``), adds it as a column at the deepest node where it resolves, and carries it up
through the nodes above whose rows are their child's (select, filter, ...), so the written
DataFrame keeps the job's columns plus the event time. Inside a wrapped ``foreachBatch``
function the column is already below what the function writes, and is carried up the same way.
"""

from __future__ import annotations

import copy
import json
from typing import TYPE_CHECKING, Any

from spark_tagger.event_time import (
    EVENT_TIME_COLUMN,
    TIME_WINDOW_KEY,
    WATERMARK_KEY,
    EventTimeError,
    millis_sql,
)

if TYPE_CHECKING:
    from pyspark.sql.connect.dataframe import DataFrame as ConnectDataFrame

# Client plan nodes whose rows are their child's rows (possibly fewer, reordered or renamed)
_PASSTHROUGH = {"Project", "Filter", "SubqueryAlias", "Sort", "Repartition",
                "RepartitionByExpression", "Hint", "Sample", "WithColumns", "Drop",
                "WithColumnsRenamed"}




def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def attach_event_time_connect(df: ConnectDataFrame, expression: str | None
                              ) -> tuple[ConnectDataFrame, str]:
    """``df`` with :data:`EVENT_TIME_COLUMN` added, by the rules of :mod:`.event_time`."""
    from pyspark.errors import AnalysisException
    from pyspark.sql.connect.dataframe import DataFrame as CDF

    session = df.sparkSession
    spine = _spine(df)

    def frame(depth: int) -> ConnectDataFrame:
        return df if depth == 0 else CDF(spine[depth], session)

    chosen: tuple[int, str, str] | None = None  # depth, sql, description
    if expression is not None:
        for depth in range(len(spine)):
            try:
                probe = frame(depth).selectExpr(f"({expression}) AS {EVENT_TIME_COLUMN}")
                type_json = json.loads(probe.schema.fields[0].dataType.json())
            except AnalysisException:
                continue
            try:
                sql = millis_sql(f"({expression})", type_json)
            except EventTimeError as exc:
                raise EventTimeError(f"--event-time {expression!r}: {exc}; pass a timestamp, "
                                     "a window or epoch milliseconds") from None
            chosen = (depth, sql, f"--event-time {expression}")
            break
        if chosen is None:
            raise EventTimeError(f"--event-time {expression!r} does not resolve against the "
                                 "written DataFrame nor the plan below it; name a column the "
                                 "job has (before its final select)")
    else:
        for depth in range(len(spine)):
            fields = frame(depth).schema.fields
            marked = [f for f in fields if WATERMARK_KEY in (f.metadata or {})]
            if not marked:
                continue
            if len(marked) > 1:
                names = ", ".join(f.name for f in marked)
                raise EventTimeError(
                    f"the query has more than one watermarked column ({names}), as a "
                    "stream-stream join keeps each side's; pass --event-time COLUMN or "
                    "--event-time 'greatest(a, b)' to say which is the records' event time")
            f = marked[0]
            sql = millis_sql(_quote(f.name), json.loads(f.dataType.json()))
            what = (f"end of window column {f.name!r}" if TIME_WINDOW_KEY in f.metadata
                    else f"watermark column {f.name!r}")
            chosen = (depth, sql, what)
            break
        if chosen is None:
            raise EventTimeError(
                "cannot tell the event time of the output records: the query defines no "
                "watermark (withWatermark) on a column that reaches the written DataFrame; "
                "pass --event-time COLUMN (a timestamp or epoch-ms column of the job's data) "
                "or --event-time 'SQL expression'")
    depth, sql, what = chosen
    return _carry_up(df, spine, depth,
                     frame(depth).selectExpr("*", f"{sql} AS {EVENT_TIME_COLUMN}")._plan), what


def _spine(df: ConnectDataFrame) -> list[Any]:
    """``df``'s plan and the nodes below it whose rows are their child's."""
    spine = [df._plan]
    while type(spine[-1]).__name__ in _PASSTHROUGH and spine[-1]._child is not None:
        spine.append(spine[-1]._child)
    return spine


def _carry_up(df: ConnectDataFrame, spine: list[Any], depth: int, plan: Any
              ) -> ConnectDataFrame:
    """``df`` rebuilt on ``plan`` (which has the event-time column) in place of the node at
    ``depth``, every projection above it keeping the column."""
    from pyspark.sql.connect import functions as CF
    from pyspark.sql.connect.dataframe import DataFrame as CDF

    for above in reversed(spine[:depth]):
        node: Any = copy.copy(above)
        node._child = plan
        if type(node).__name__ == "Project":
            node._columns = [*node._columns, CF.col(EVENT_TIME_COLUMN)]
        plan = node
    out = CDF(plan, df.sparkSession)
    if out.columns[:-1] != df.columns:
        raise EventTimeError("internal: carrying the event time changed the job's columns "
                             f"({df.columns} -> {out.columns})")
    return out


def carried_event_time_connect(df: ConnectDataFrame) -> ConnectDataFrame:
    """``df`` as written inside a wrapped ``foreachBatch`` function, with the event-time column
    its query carried brought up from below (through select, filter and the like);
    :class:`EventTimeError` when no node below has it."""
    from pyspark.sql.connect.dataframe import DataFrame as CDF

    spine = _spine(df)
    for depth, node in enumerate(spine):
        frame = df if depth == 0 else CDF(node, df.sparkSession)
        if EVENT_TIME_COLUMN in frame.columns:
            return df if depth == 0 else _carry_up(df, spine, depth, node)
    raise EventTimeError("the written DataFrame does not keep the batch's rows")
