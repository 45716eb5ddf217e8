"""Green of ``windowed_totals_foreach_batch.py``: ``windowed_totals_green.py``'s logic (totals
in whole units, half-even, plus ``max_amount``), written batch by batch from ``foreachBatch``.
"""

from __future__ import annotations

import argparse
import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default=env("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--input", default=env("INPUT_TOPIC", "orders"))
    p.add_argument("--output", default=env("OUTPUT_TOPIC", "customer_totals.raw"))
    p.add_argument("--checkpoint", default=env("CHECKPOINT_DIR", "/tmp/checkpoints/totals-green"))
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--window", default="10 seconds")
    p.add_argument("--watermark-delay", default="5 seconds")
    p.add_argument("--trigger", default="1 second", help="processing-time trigger interval")
    p.add_argument("--available-now", action="store_true",
                   help="process what the input holds now, then stop")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    spark = (SparkSession.builder.appName("windowed-totals-foreach-batch-green")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())

    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("startingOffsets", args.starting_offsets))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)

    orders = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*")
              .withColumn("event_time", F.timestamp_millis("ts")))

    totals = (orders
              .withWatermark("event_time", args.watermark_delay)
              .groupBy(F.window("event_time", args.window), "customer")
              # green: totals in whole currency units (half-even), and the largest order
              .agg(F.count("*").alias("orders"),
                   F.bround(F.sum("amount"), 0).cast("long").alias("total"),
                   F.max("amount").alias("max_amount")))

    out = totals.select(
        F.col("customer").alias("key"),
        F.to_json(F.struct(
            "customer",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "orders",
            "total",
            "max_amount",
        )).alias("value"),
    )

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        (batch.write.format("kafka")
         .option("kafka.bootstrap.servers", args.bootstrap)
         .option("topic", args.output)
         .save())

    writer = (out.writeStream.foreachBatch(write_batch)
              .option("checkpointLocation", args.checkpoint)
              .outputMode("append"))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger)
    writer.start().awaitTermination()


if __name__ == "__main__":
    main()
