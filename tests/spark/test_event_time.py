"""Event-time detection: found in the plan, carried through the job's final select, exact."""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import Any

import pytest
from pyspark.sql import functions as F

from cutover.cli.orders import EventSpec, make_orders, write_orders
from spark_tagger.event_time import EVENT_TIME_COLUMN, EventTimeError, attach_event_time, millis_sql
from spark_tagger.spark_version import has_python_data_sources
from testground.brokers import create_topics

pytestmark = [pytest.mark.spark, pytest.mark.broker]

SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"


@pytest.fixture(scope="module")
def orders_topic(bootstrap: str) -> str:
    topic = f"et-orders-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {topic: 2})
    write_orders(bootstrap, topic, make_orders(EventSpec(seed=3, count=200, closing_gap_ms=60_000)))
    return topic


def _orders(spark: Any, bootstrap: str, topic: str) -> Any:
    """The orders as a stream: through the pure-Python source on Spark 4, Spark's own
    connector on 3.5 (the session's, tests/spark/conftest.py)."""
    source = "cutover_kafka" if has_python_data_sources() else "kafka"
    return (spark.readStream.format(source).option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic).option("startingOffsets", "earliest").load()
            .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("o")).select("o.*")
            .withColumn("event_time", F.timestamp_millis("ts")))


def _run(df: Any) -> list[Any]:
    name = f"et_{uuid.uuid4().hex[:8]}"
    q = df.writeStream.format("memory").queryName(name).trigger(availableNow=True).start()
    q.awaitTermination(180)
    assert q.exception() is None
    return df.sparkSession.table(name).collect()


def _ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).timestamp() * 1000)


def test_windowed_aggregation_event_time_is_the_window_end(
    spark: Any, bootstrap: str, orders_topic: str
) -> None:
    agg = (_orders(spark, bootstrap, orders_topic).withWatermark("event_time", "5 seconds")
           .groupBy(F.window("event_time", "10 seconds"), "customer").count())
    out = agg.select(F.col("customer").alias("key"), F.to_json(F.struct(
        F.col("window.end").alias("end"), "count")).alias("value"))
    tagged, found = attach_event_time(out)
    assert found.description == "end of window column 'window'" and found.depth == 1
    assert tagged.columns == [*out.columns, EVENT_TIME_COLUMN]
    rows = _run(tagged)
    assert len(rows) > 10
    for row in rows:
        assert row[EVENT_TIME_COLUMN] == _ms(json.loads(row.value)["end"])


def test_watermark_column_dropped_by_the_final_select_is_carried(
    spark: Any, bootstrap: str, orders_topic: str
) -> None:
    out = (_orders(spark, bootstrap, orders_topic).withWatermark("event_time", "5 seconds")
           .where("amount >= 5").withColumn("tier", F.lit("x"))
           .select(F.col("customer").alias("key"), F.to_json(F.struct("order_id", "ts"))
                   .alias("value")))
    tagged, found = attach_event_time(out)
    assert found.description == "watermark column 'event_time'" and found.depth > 0
    rows = _run(tagged)
    assert len(rows) > 100
    assert all(r[EVENT_TIME_COLUMN] == json.loads(r.value)["ts"] for r in rows)


def test_operator_expression_resolves_below_the_final_select(
    spark: Any, bootstrap: str, orders_topic: str
) -> None:
    out = _orders(spark, bootstrap, orders_topic).select(
        F.col("customer").alias("key"), F.to_json(F.struct("order_id", "ts")).alias("value"))
    with pytest.raises(EventTimeError, match="pass --event-time COLUMN"):
        attach_event_time(out)
    for expression in ("ts", "timestamp_millis(ts + 1000)", "CAST(ts AS STRING)"):
        tagged, found = attach_event_time(out, expression)
        assert found.description == f"--event-time {expression}"
        shift = 1000 if "+ 1000" in expression else 0
        rows = _run(tagged)
        assert rows and all(
            r[EVENT_TIME_COLUMN] == json.loads(r.value)["ts"] + shift for r in rows)
    with pytest.raises(EventTimeError, match="does not resolve"):
        attach_event_time(out, "no_such_column")
    with pytest.raises(EventTimeError, match="not a time"):
        attach_event_time(out, "array(1, 2)")


def test_two_watermarked_columns_are_ambiguous(
    spark: Any, bootstrap: str, orders_topic: str
) -> None:
    left = _orders(spark, bootstrap, orders_topic).withWatermark("event_time", "5 seconds")
    right = (_orders(spark, bootstrap, orders_topic)
             .select(F.col("order_id").alias("rid"), F.col("event_time").alias("rtime"))
             .withWatermark("rtime", "5 seconds"))
    joined = left.join(right, F.expr("order_id = rid AND rtime BETWEEN event_time AND "
                                     "event_time + interval 1 minute"))
    out = joined.select(F.col("customer").alias("key"), F.col("order_id").alias("value"))
    with pytest.raises(EventTimeError, match=r"more than one watermarked column \(.*event_time"):
        attach_event_time(out)
    _, found = attach_event_time(out, "rtime")
    assert found.description == "--event-time rtime"


def test_millis_sql_by_type() -> None:
    assert millis_sql("t", "timestamp") == "unix_millis(CAST((t) AS TIMESTAMP))"
    assert millis_sql("n", "long") == "CAST((n) AS BIGINT)"
    window = {"type": "struct", "fields": [{"name": "start", "type": "timestamp"},
                                           {"name": "end", "type": "timestamp"}]}
    assert "`end`" in millis_sql("w", window)
    with pytest.raises(EventTimeError):
        millis_sql("b", "boolean")
