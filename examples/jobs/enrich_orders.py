"""Stateless enrichment: drop small orders, add a tier and the amount in EUR, one record per order.

A plain Structured Streaming job; its watermark on the event time is what tells the tagger (and
the router) how far the job has got. Run it under the tagger with

    cutover tag --version blue -- examples/jobs/enrich_orders.py --bootstrap HOST:PORT \
        --input orders --output orders_enriched.raw --checkpoint /tmp/ck/enrich-blue
"""

from __future__ import annotations

import argparse
import os

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"
EUR_RATES = {"DE": "1.00", "FR": "1.00", "US": "0.92", "GB": "1.17", "JP": "0.0061"}
MIN_AMOUNT = 5
HIGH_TIER = 100


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default=env("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--input", default=env("INPUT_TOPIC", "orders"))
    p.add_argument("--output", default=env("OUTPUT_TOPIC", "orders_enriched.raw"))
    p.add_argument("--checkpoint", default=env("CHECKPOINT_DIR", "/tmp/checkpoints/enrich"))
    p.add_argument("--starting-offsets", default="earliest")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--watermark-delay", default="5 seconds")
    p.add_argument("--trigger", default="1 second", help="processing-time trigger interval")
    p.add_argument("--available-now", action="store_true",
                   help="process what the input holds now, then stop")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    spark = (SparkSession.builder.appName("enrich-orders")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())

    reader = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("startingOffsets", args.starting_offsets))
    if args.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)

    rates = F.create_map(*[x for c, r in EUR_RATES.items()
                           for x in (F.lit(c), F.lit(r).cast("decimal(10,4)"))])
    orders = (reader.load()
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*")
              .withColumn("event_time", F.timestamp_millis("ts"))
              .withWatermark("event_time", args.watermark_delay))

    enriched = (orders
                .where(F.col("amount") >= MIN_AMOUNT)
                .withColumn("tier", F.when(F.col("amount") >= HIGH_TIER, "high")
                            .otherwise("normal"))
                .withColumn("amount_eur", F.round(F.col("amount") * rates[F.col("country")], 2)))

    out = enriched.select(
        F.col("customer").alias("key"),
        F.to_json(F.struct("order_id", "customer", "country", "amount", "amount_eur", "tier",
                           "ts")).alias("value"),
    )

    writer = (out.writeStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.output)
              .option("checkpointLocation", args.checkpoint))
    if args.available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=args.trigger)
    writer.start().awaitTermination()


if __name__ == "__main__":
    main()
