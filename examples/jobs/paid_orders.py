"""Orders joined with their payments: a stream-stream join with a watermark on each side.

Each order that is paid within ``--pay-within`` of being placed yields one record: the order,
its payment time and how long it took. Both inputs carry a watermark, so Spark keeps a bounded
join state and the query has one global watermark (the minimum of the two, Spark's default
``spark.sql.streaming.multipleWatermarkPolicy``). The output keeps both time columns, so the
tagger needs to be told which time is the records' event time; run it with

    cutover tag --version blue --event-time 'greatest(order_time, paid_time)' -- \
        examples/jobs/paid_orders.py --bootstrap HOST:PORT --orders orders \
        --payments payments --output paid_orders.raw --checkpoint /tmp/ck/paid-blue
"""

from __future__ import annotations

import argparse
import os

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

ORDER_SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"
PAYMENT_SCHEMA = "order_id STRING, paid_ts BIGINT"


def parse_args() -> argparse.Namespace:
    env = os.environ.get
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--bootstrap", default=env("KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--orders", default="orders")
    p.add_argument("--payments", default="payments")
    p.add_argument("--output", default=env("OUTPUT_TOPIC", "paid_orders.raw"))
    p.add_argument("--checkpoint", default=env("CHECKPOINT_DIR", "/tmp/checkpoints/paid"))
    p.add_argument("--max-offsets-per-trigger", type=int, default=None)
    p.add_argument("--order-delay", default="10 seconds", help="watermark delay of the orders")
    p.add_argument("--payment-delay", default="15 seconds",
                   help="watermark delay of the payments")
    p.add_argument("--pay-within", default="30 seconds")
    p.add_argument("--trigger", default="1 second", help="processing-time trigger interval")
    p.add_argument("--available-now", action="store_true",
                   help="process what the inputs hold now, then stop")
    return p.parse_args()


def main() -> None:
    args = parse_args()
    spark = (SparkSession.builder.appName("paid-orders")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())

    def read(topic: str, schema: str) -> DataFrame:
        reader = (spark.readStream.format("kafka")
                  .option("kafka.bootstrap.servers", args.bootstrap)
                  .option("subscribe", topic).option("startingOffsets", "earliest"))
        if args.max_offsets_per_trigger:
            reader = reader.option("maxOffsetsPerTrigger", args.max_offsets_per_trigger)
        return (reader.load().select(F.from_json(F.col("value").cast("string"), schema)
                                     .alias("r")).select("r.*"))

    orders = (read(args.orders, ORDER_SCHEMA)
              .withColumn("order_time", F.timestamp_millis("ts"))
              .withWatermark("order_time", args.order_delay))
    payments = (read(args.payments, PAYMENT_SCHEMA)
                .withColumnRenamed("order_id", "paid_order_id")
                .withColumn("paid_time", F.timestamp_millis("paid_ts"))
                .withWatermark("paid_time", args.payment_delay))
    paid = orders.join(payments, F.expr(
        f"paid_order_id = order_id AND paid_time >= order_time "
        f"AND paid_time <= order_time + interval {args.pay_within}"))
    out = paid.select(
        F.col("order_id").alias("key"),
        F.to_json(F.struct("order_id", "customer", "amount", "ts", "paid_ts",
                           (F.col("paid_ts") - F.col("ts")).alias("took_ms"))).alias("value"),
    )
    writer = (out.writeStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("topic", args.output)
              .option("checkpointLocation", args.checkpoint))
    writer = (writer.trigger(availableNow=True) if args.available_now
              else writer.trigger(processingTime=args.trigger))
    writer.start().awaitTermination()


if __name__ == "__main__":
    main()
