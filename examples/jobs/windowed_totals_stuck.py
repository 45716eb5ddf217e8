"""A deliberately broken version for the demo and the rollback tests: green's windowed totals
(windowed_totals_green.py) with a customer lookup that can get stuck. When the file
``--stall-file`` names appears, the first row that sees it claims it (renames it) and the
lookup hangs, as a call to a service that never answers: the job stays up and emits nothing
more. Once only: restarted on its checkpoint, the job replays the batch and goes on. It knows
nothing of the tagger.

    cutover tag --version v3 -- examples/jobs/windowed_totals_stuck.py --bootstrap HOST:PORT \
        --input orders --output customer_totals.raw --checkpoint /tmp/ck/v3 --stall-file /tmp/v3
"""

from __future__ import annotations

import argparse
import os
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StringType

ORDER_SCHEMA = "order_id STRING, customer STRING, country STRING, amount DECIMAL(12,2), ts BIGINT"


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--input", required=True)
    p.add_argument("--output", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--stall-file", required=True)
    p.add_argument("--trigger", default="1 second")
    args = p.parse_args()
    stall_file = args.stall_file

    @F.udf(StringType())
    def customer_lookup(customer: str) -> str:
        if os.path.exists(stall_file):
            try:
                os.rename(stall_file, stall_file + ".taken")
            except OSError:
                return customer
            while True:  # stuck on an external call
                time.sleep(3600)
        return customer

    spark = (SparkSession.builder.appName("windowed-totals-stuck")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    orders = (spark.readStream.format("kafka")
              .option("kafka.bootstrap.servers", args.bootstrap)
              .option("subscribe", args.input)
              .option("startingOffsets", "earliest")
              .load()
              .select(F.from_json(F.col("value").cast("string"), ORDER_SCHEMA).alias("o"))
              .select("o.*")
              .withColumn("customer", customer_lookup("customer"))
              .withColumn("event_time", F.timestamp_millis("ts")))
    totals = (orders
              .withWatermark("event_time", "5 seconds")
              .groupBy(F.window("event_time", "10 seconds"), "customer")
              .agg(F.count("*").alias("orders"),
                   F.bround(F.sum("amount"), 0).cast("long").alias("total"),
                   F.max("amount").alias("max_amount")))
    out = totals.select(
        F.col("customer").alias("key"),
        F.to_json(F.struct("customer", F.col("window.start").alias("window_start"),
                           F.col("window.end").alias("window_end"), "orders", "total",
                           "max_amount")).alias("value"))
    (out.writeStream.format("kafka")
     .option("kafka.bootstrap.servers", args.bootstrap)
     .option("topic", args.output)
     .option("checkpointLocation", args.checkpoint)
     .outputMode("append")
     .trigger(processingTime=args.trigger)
     .start().awaitTermination())


if __name__ == "__main__":
    main()
