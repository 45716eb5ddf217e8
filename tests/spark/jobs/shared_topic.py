"""Two queries of one job writing to one topic, with different watermark delays.

``orders`` copies every order (watermark 5 s behind); ``totals`` counts per customer per 10 s
window (watermark 20 s behind, append mode). Args: bootstrap input output checkpoint-root
[max-offsets-per-trigger [trigger]]: at most 60 input records a batch unless told, and trigger
``available-now`` (the default: read what is there, then stop) or ``continuous`` (a batch every
half second until killed).
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

bootstrap, source, sink, root = sys.argv[1:5]
max_offsets = int(sys.argv[5]) if len(sys.argv) > 5 else 60
trigger = sys.argv[6] if len(sys.argv) > 6 else "available-now"
assert trigger in ("available-now", "continuous"), trigger
SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"
spark = SparkSession.builder.appName("shared-topic").getOrCreate()


def orders(delay: str):  # type: ignore[no-untyped-def]
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", max_offsets).load()
            .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("o")).select("o.*")
            .withColumn("event_time", F.timestamp_millis("ts")).withWatermark("event_time", delay))


copies = orders("5 seconds").select(F.col("customer").alias("key"),
                                    F.to_json(F.struct("order_id", "ts")).alias("value"))
totals = (orders("20 seconds").groupBy(F.window("event_time", "10 seconds"), "customer").count()
          .select(F.col("customer").alias("key"),
                  F.to_json(F.struct(F.col("window.end").alias("window_end"), "count"))
                  .alias("value")))
writers = [df.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("topic", sink).option("checkpointLocation", os.path.join(root, name))
           .queryName(name) for name, df in (("orders", copies), ("totals", totals))]
queries = [(w.trigger(availableNow=True) if trigger == "available-now"
            else w.trigger(processingTime="500 milliseconds")).start() for w in writers]
for q in queries:
    q.awaitTermination()
