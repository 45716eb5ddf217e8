"""Two queries of one job writing to one topic, with different watermark delays.

``orders`` copies every order (watermark 5 s behind); ``totals`` counts per customer per 10 s
window (watermark 20 s behind, append mode). Args: bootstrap input output checkpoint-root.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

bootstrap, source, sink, root = sys.argv[1:5]
SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"
spark = SparkSession.builder.appName("shared-topic").getOrCreate()


def orders(delay: str):  # type: ignore[no-untyped-def]
    return (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", source).option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 60).load()
            .select(F.from_json(F.col("value").cast("string"), SCHEMA).alias("o")).select("o.*")
            .withColumn("event_time", F.timestamp_millis("ts")).withWatermark("event_time", delay))


copies = orders("5 seconds").select(F.col("customer").alias("key"),
                                    F.to_json(F.struct("order_id", "ts")).alias("value"))
totals = (orders("20 seconds").groupBy(F.window("event_time", "10 seconds"), "customer").count()
          .select(F.col("customer").alias("key"),
                  F.to_json(F.struct(F.col("window.end").alias("window_end"), "count"))
                  .alias("value")))
queries = [df.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("topic", sink).option("checkpointLocation", os.path.join(root, name))
           .queryName(name).trigger(availableNow=True).start()
           for name, df in (("orders", copies), ("totals", totals))]
for q in queries:
    q.awaitTermination()
