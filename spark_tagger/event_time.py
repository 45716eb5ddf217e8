"""Finding a streaming query's event time and carrying it to the sink as one extra column.

The job's output DataFrame usually no longer holds its event time: a windowed aggregation's
final ``select(key, to_json(...))`` drops the window. So the tagger looks into the analyzed plan:
it walks down from the root through the nodes that keep their child's rows (Project, Filter, ...)
to the highest node whose output has the watermarked column (Spark marks it, and the window
derived from it, with ``spark.watermarkDelayMs``), computes the event time there in epoch
milliseconds (the window's end for a window) and adds that column to every Project above it.
Rows, their order and the job's own columns are unchanged.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from spark_tagger.spark_version import classic_dataframe, dataset_of_rows, java_list, scala_seq

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

EVENT_TIME_COLUMN = "__bg_event_time"
WATERMARK_KEY = "spark.watermarkDelayMs"
TIME_WINDOW_KEY = "spark.timeWindow"

# Nodes whose output rows are their child's rows (possibly fewer, reordered or renamed).
_PASSTHROUGH = {"Project", "Filter", "SubqueryAlias", "Sort", "Repartition",
                "RepartitionByExpression", "Sample", "ResolvedHint"}


class EventTimeError(ValueError):
    """The event time cannot be found or computed; the message says what to pass."""


class Found(BaseModel):
    """Where the event time comes from, for the launcher's start-up line."""

    model_config = ConfigDict(frozen=True)

    description: str
    depth: int  # 0 = the written DataFrame itself


def _seq(jvm: Any, scala_seq: Any) -> list[Any]:
    return list(java_list(jvm, scala_seq))


def _to_scala_seq(jvm: Any, items: list[Any]) -> Any:
    jlist = jvm.java.util.ArrayList()
    for item in items:
        jlist.add(item)
    return scala_seq(jvm, jlist)


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def millis_sql(sql: str, type_json: dict[str, Any] | str) -> str:
    """SQL turning a column of this type into epoch milliseconds (BIGINT); raises if it can't."""
    if isinstance(type_json, dict) and type_json.get("type") == "struct":
        names = {f["name"]: f["type"] for f in type_json["fields"]}
        if "end" in names and names["end"] in ("timestamp", "timestamp_ntz"):
            return f"unix_millis(CAST(({sql}).`end` AS TIMESTAMP))"
        raise EventTimeError(f"{sql} is a struct without a timestamp 'end' field")
    if type_json in ("timestamp", "timestamp_ntz", "date"):
        return f"unix_millis(CAST(({sql}) AS TIMESTAMP))"
    if type_json in ("long", "integer", "short", "byte") or (
        isinstance(type_json, str) and type_json.startswith(("decimal", "double", "float"))
    ):
        return f"CAST(({sql}) AS BIGINT)"  # taken as epoch milliseconds
    if type_json == "string":
        return (f"coalesce(try_cast(({sql}) AS BIGINT), "
                f"unix_millis(try_cast(({sql}) AS TIMESTAMP)))")
    raise EventTimeError(f"{sql} has type {type_json}, which is not a time")


def _watermarked(jvm: Any, node: Any) -> list[tuple[str, bool]]:
    """(name, is a time window) of the node's output attributes that carry the watermark."""
    out = []
    for attr in _seq(jvm, node.output()):
        meta = attr.metadata()
        if meta.contains(WATERMARK_KEY):
            out.append((attr.name(), bool(meta.contains(TIME_WINDOW_KEY))))
    return out


def _carried(jvm: Any, spine: list[Any]) -> int | None:
    """Depth of the node whose last output column is :data:`EVENT_TIME_COLUMN`, if any.

    The launcher adds that column to a ``foreachBatch`` query at start and hands the job's
    function the batch without it; a DataFrame the function derives from the batch through
    pass-through nodes still has it underneath.
    """
    for depth, plan in enumerate(spine):
        names = [a.name() for a in _seq(jvm, plan.output())]
        if names and names[-1] == EVENT_TIME_COLUMN and depth > 0:
            return depth
    return None


def attach_event_time(df: DataFrame, expression: str | None = None) -> tuple[DataFrame, Found]:
    """``df`` with one more BIGINT column, :data:`EVENT_TIME_COLUMN`; same rows otherwise.

    ``expression`` (the operator's ``--event-time``) is a column name or SQL expression; it is
    resolved against the written DataFrame first, then against the nodes below it. Without it,
    the watermarked column is used.
    """
    import json

    from pyspark.errors import AnalysisException

    spark = df.sparkSession
    jvm = spark._jvm
    assert jvm is not None
    spine = [df._jdf.queryExecution().analyzed()]
    while spine[-1].getClass().getSimpleName() in _PASSTHROUGH:
        children = _seq(jvm, spine[-1].children())
        if len(children) != 1:
            break
        spine.append(children[0])

    def frame(plan: Any) -> DataFrame:
        return classic_dataframe(dataset_of_rows(spark, plan), spark)  # type: ignore[no-any-return]

    chosen: tuple[int, DataFrame, str, str] | None = None  # depth, frame, sql, description
    carried = _carried(jvm, spine)
    if carried is not None:
        # a foreachBatch DataFrame: the event time was computed on the streaming query at start
        chosen = (carried, frame(spine[carried]), "", "the event time its query carries")
    elif expression is not None:
        for depth, plan in enumerate(spine):
            f = df if depth == 0 else frame(plan)
            try:
                probe = f.selectExpr(f"({expression}) AS {EVENT_TIME_COLUMN}")
            except AnalysisException:
                continue
            type_json = json.loads(probe.schema.fields[0].dataType.json())
            try:
                sql = millis_sql(f"({expression})", type_json)
            except EventTimeError as exc:
                raise EventTimeError(f"--event-time {expression!r}: {exc}; pass a timestamp, "
                                     "a window or epoch milliseconds") from None
            chosen = (depth, f, sql, f"--event-time {expression}")
            break
        if chosen is None:
            raise EventTimeError(
                f"--event-time {expression!r} does not resolve against the written DataFrame "
                "nor the plan below it; name a column the job has (before its final select) "
                "or give a SQL expression over such columns"
            )
    else:
        for depth, plan in enumerate(spine):
            marked = _watermarked(jvm, plan)
            if not marked:
                continue
            if len(marked) > 1:
                names = ", ".join(n for n, _ in marked)
                raise EventTimeError(
                    f"the query has more than one watermarked column ({names}), as a "
                    "stream-stream join keeps each side's; pass --event-time COLUMN or "
                    "--event-time 'greatest(a, b)' to say which is the records' event time"
                )
            name, is_window = marked[0]
            f = df if depth == 0 else frame(plan)
            field = next(x for x in f.schema.fields if x.name == name)
            sql = millis_sql(_quote(name), json.loads(field.dataType.json()))
            what = f"end of window column {name!r}" if is_window else f"watermark column {name!r}"
            chosen = (depth, f, sql, what)
            break
        if chosen is None:
            raise EventTimeError(
                "cannot tell the event time of the output records: the query defines no "
                "watermark (withWatermark) on a column that reaches the written DataFrame; "
                "pass --event-time COLUMN (a timestamp or epoch-ms column of the job's data) "
                "or --event-time 'SQL expression'"
            )
    depth, base, sql, what = chosen
    with_col = base.selectExpr("*", f"{sql} AS {EVENT_TIME_COLUMN}") if sql else base
    if depth == 0:
        return with_col, Found(description=what, depth=0)
    # carry the new column up through the pass-through nodes above the one that computes it
    plan = with_col._jdf.queryExecution().analyzed()
    attr = _seq(jvm, plan.output())[-1]
    logical = jvm.org.apache.spark.sql.catalyst.plans.logical
    for node in reversed(spine[:depth]):
        if node.getClass().getSimpleName() == "Project":
            projection = [*_seq(jvm, node.projectList()), attr]
            plan = logical.Project(_to_scala_seq(jvm, projection), plan)
        else:
            plan = node.withNewChildren(_to_scala_seq(jvm, [plan]))
    out = frame(plan)
    if out.schema.fieldNames()[:-1] != df.schema.fieldNames():
        raise EventTimeError("internal: carrying the event time changed the job's columns "
                             f"({df.schema.fieldNames()} -> {out.schema.fieldNames()})")
    return out, Found(description=what, depth=depth)
