"""One job, three streaming queries: enriched orders and per-window totals to two Kafka sinks,
and an audit trail written batch by batch from ``foreachBatch``.

The shape data teams have once a job grows: several ``writeStream`` queries over one input, and
a ``foreachBatch`` function that writes each micro-batch with the batch Kafka writer
(``df.write.format("kafka")...save()``, default save mode). Run it under the tagger with

    cutover tag --version blue -- examples/jobs/orders_with_audit.py --bootstrap HOST:PORT \
        --input orders --enriched enriched.raw --totals totals.raw --audit audit.raw \
        --checkpoint /tmp/ck/audit-blue

Each query has its own checkpoint under ``--checkpoint`` (``enriched``, ``totals``, ``audit``).
"""

from __future__ import annotations

import argparse
import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"
MIN_AMOUNT = 5
HIGH_TIER = 100


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default=env("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--input", default=env("INPUT_TOPIC", "orders"))
    p.add_argument("--enriched", default="orders_enriched.raw")
    p.add_argument("--totals", default="customer_totals.raw")
    p.add_argument("--audit", default="orders_audit.raw")
    p.add_argument("--checkpoint", default=env("CHECKPOINT_DIR", "/tmp/checkpoints/audit"))
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
    spark = (SparkSession.builder.appName("orders-with-audit")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())

    def orders() -> DataFrame:
        reader = (spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", args.bootstrap)
                  .option("subscribe", args.input)
                  .option("startingOffsets", args.starting_offsets))
        if args.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        return (reader.load()
                .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
                .select("o.*")
                .withColumn("event_time", F.timestamp_millis("ts"))
                .withWatermark("event_time", args.watermark_delay))

    def to_kafka(df: DataFrame, topic: str, name: str) -> object:
        writer = (df.writeStream.format("kafka")
                  .option("kafka.bootstrap.servers", args.bootstrap)
                  .option("topic", topic)
                  .option("checkpointLocation", os.path.join(args.checkpoint, name))
                  .queryName(name))
        writer = (writer.trigger(availableNow=True) if args.available_now
                  else writer.trigger(processingTime=args.trigger))
        return writer.start()

    enriched = (orders().where(F.col("amount") >= MIN_AMOUNT)
                .withColumn("tier", F.when(F.col("amount") >= HIGH_TIER, "high")
                            .otherwise("normal"))
                .select(F.col("customer").alias("key"),
                        F.to_json(F.struct("order_id", "customer", "amount", "tier", "ts"))
                        .alias("value")))
    totals = (orders().groupBy(F.window("event_time", args.window), "customer")
              .agg(F.count("*").alias("orders"), F.sum("amount").alias("total"))
              .select(F.col("customer").alias("key"),
                      F.to_json(F.struct("customer", F.col("window.start").alias("window_start"),
                                         F.col("window.end").alias("window_end"),
                                         "orders", "total")).alias("value")))

    def audit(batch: DataFrame, batch_id: int) -> None:
        """Every order read, as it was read, to the audit topic: the batch Kafka writer."""
        (batch.select(F.col("order_id").alias("key"),
                      F.to_json(F.struct("order_id", "customer", "amount", "ts")).alias("value"))
         .write.format("kafka")
         .option("kafka.bootstrap.servers", args.bootstrap)
         .option("topic", args.audit)
         .save())

    audit_writer = (orders().writeStream.foreachBatch(audit)
                    .option("checkpointLocation", os.path.join(args.checkpoint, "audit"))
                    .queryName("audit"))
    audit_writer = (audit_writer.trigger(availableNow=True) if args.available_now
                    else audit_writer.trigger(processingTime=args.trigger))
    queries = [to_kafka(enriched, args.enriched, "enriched"),
               to_kafka(totals, args.totals, "totals"),
               audit_writer.start()]
    for query in queries:
        query.awaitTermination()  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
