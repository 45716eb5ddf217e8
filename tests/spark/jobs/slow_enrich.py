"""A slow stateless job (a Python UDF that takes 40 ms a row), so a test can kill it mid-batch.

Written as a user would; it knows nothing of the tagger. Logic as examples/jobs/enrich_orders.py.
"""

from __future__ import annotations

import argparse
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

ORDER_SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"


@F.udf(StringType())
def slow_lookup(order_id: str) -> str:
    time.sleep(0.04)  # stands for a slow external lookup
    return order_id


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--max-offsets-per-trigger", type=int, default=80)
    p.add_argument("--available-now", action="store_true")
    args = p.parse_args()

    spark = SparkSession.builder.appName("slow-enrich").getOrCreate()
    orders = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
              .load()
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*")
              .withColumn("event_time", F.timestamp_millis("ts"))
              .withWatermark("event_time", "5 seconds"))
    out = (orders.where(F.col("amount") >= 5)
           .withColumn("order_id", slow_lookup("order_id"))
           .select(F.col("customer").alias("key"),
                   F.to_json(F.struct("order_id", "customer", "amount", "ts")).alias("value")))
    writer = (out.writeStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.output)
              .option("checkpointLocation", args.checkpoint))
    writer = (writer.trigger(availableNow=True) if args.available_now
              else writer.trigger(processingTime="500 milliseconds"))
    writer.start().awaitTermination()


if __name__ == "__main__":
    main()
