"""Orders per customer per 10-second window, written batch by batch from ``foreachBatch``.

``windowed_totals.py`` with one difference: instead of ``writeStream.format("kafka")``, each
micro-batch goes to Kafka from a ``foreachBatch`` function with the batch Kafka writer
(``df.write.format("kafka")...save()``), as jobs that also write elsewhere per batch do. Run it
under the tagger with

    cutover tag --version blue -- examples/jobs/windowed_totals_foreach_batch.py \
        --bootstrap HOST:PORT --input orders --output customer_totals.raw --checkpoint /tmp/ck/fb

With ``--remote local[2]`` (or ``sc://host:port``) its session is a Spark Connect client and the
function runs in the Connect server's Python, which must be able to import the tagger.
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
    p.add_argument("--checkpoint", default=env("CHECKPOINT_DIR", "/tmp/checkpoints/totals"))
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--window", default="10 seconds")
    p.add_argument("--watermark-delay", default="5 seconds")
    p.add_argument("--trigger", default="1 second", help="processing-time trigger interval")
    p.add_argument("--remote", default=None,
                   help="a Spark Connect URL (sc://host:port, or local[N] for a local server)")
    p.add_argument("--available-now", action="store_true",
                   help="process what the input holds now, then stop")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    builder = (SparkSession.builder.remote(args.remote) if args.remote
               else SparkSession.builder.appName("windowed-totals-foreach-batch"))
    spark = builder.config("spark.sql.session.timeZone", "UTC").getOrCreate()

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
              .agg(F.count("*").alias("orders"), F.sum("amount").alias("total")))

    out = totals.select(
        F.col("customer").alias("key"),
        F.to_json(F.struct(
            "customer",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "orders",
            "total",
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
