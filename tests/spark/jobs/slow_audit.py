"""A foreachBatch function that writes each batch to Kafka, then takes two seconds more (it
stands for a slow second write elsewhere), so a test can kill the job between the two.

Args: --bootstrap --input --output --checkpoint [--available-now] [--remote URL] (a Spark
Connect session: the function then runs in the Connect server's Python).
"""

from __future__ import annotations

import argparse
import time

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"

p = argparse.ArgumentParser()
for name in ("--bootstrap", "--input", "--output", "--checkpoint"):
    p.add_argument(name, required=True)
p.add_argument("--available-now", action="store_true")
p.add_argument("--remote", default=None)
args = p.parse_args()
spark = (SparkSession.builder.remote(args.remote) if args.remote
         else SparkSession.builder.appName("slow-audit")).getOrCreate()
orders = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
          .option("subscribe", args.input).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", 40).load()
          .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
          .select("o.*").withColumn("event_time", F.timestamp_millis("ts"))
          .withWatermark("event_time", "5 seconds"))


def audit(batch: DataFrame, batch_id: int) -> None:
    (batch.select(F.col("order_id").alias("key"),
                  F.to_json(F.struct("order_id", "customer", "ts")).alias("value"))
     .write.format("kafka").option("kafka.bootstrap.servers", args.bootstrap)
     .option("topic", args.output).save())
    time.sleep(2.0)


writer = (orders.writeStream.foreachBatch(audit).option("checkpointLocation", args.checkpoint)
          .queryName("audit"))
writer = (writer.trigger(availableNow=True) if args.available_now
          else writer.trigger(processingTime="1 second"))
writer.start().awaitTermination()
