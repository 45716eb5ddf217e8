"""Throughput of the Python Kafka sink and source, and of the tagged write (``make bench``).

Prints records/s; asserts only that every record arrived (a benchmark that loses data is void).
"""

from __future__ import annotations

import functools
import time
import uuid
from typing import Any

import pytest
from pyspark.sql import functions as F

from spark_tagger.options import SinkOptions, Tagging
from spark_tagger.tagger import _write_task
from testground.brokers import create_topics, end_offsets

pytestmark = [pytest.mark.spark, pytest.mark.broker, pytest.mark.bench]

N = 200_000


def _frame(spark: Any) -> Any:
    return (spark.range(N).repartition(2)
            .select(F.concat(F.lit("k"), (F.col("id") % 1000).cast("string")).alias("key"),
                    F.to_json(F.struct(F.col("id"), F.lit("x" * 80).alias("pad"))).alias("value"),
                    (F.col("id") * 10).alias("__bg_event_time")))


def test_sink_source_and_tagged_write_throughput(spark: Any, bootstrap: str) -> None:
    plain, tagged = f"bench-{uuid.uuid4().hex[:8]}", f"bench-t-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {plain: 4, tagged: 4})
    df = _frame(spark).cache()
    df.count()

    def write() -> float:
        t0 = time.monotonic()
        (df.select("key", "value").write.format("cutover_kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", plain).mode("append")
         .save())
        return time.monotonic() - t0

    cold_s = write()  # starts the Python workers and the cached producers
    sink_s = write()
    assert sum(end_offsets(bootstrap, plain).values()) == 2 * N

    t0 = time.monotonic()
    got = (spark.read.format("cutover_kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", plain).load().count())
    source_s = time.monotonic() - t0
    assert got == 2 * N

    opts = SinkOptions(client={"bootstrap.servers": bootstrap}, topic=tagged,
                       tagging=Tagging(version="blue", batch=0, watermark=1,
                                       event_time_column="__bg_event_time"))
    t0 = time.monotonic()
    rows = df.mapInArrow(functools.partial(_write_task, opts),
                         "records LONG, without_event_time LONG").collect()
    tagged_s = time.monotonic() - t0
    assert sum(r.records for r in rows) == N
    assert sum(end_offsets(bootstrap, tagged).values()) == N
    print(f"\nsink {N / sink_s:,.0f} rec/s (cold {N / cold_s:,.0f}), "
          f"source {2 * N / source_s:,.0f} rec/s, "
          f"tagged sink {N / tagged_s:,.0f} rec/s ({N} records of ~110 B, local[2])")
