"""A stateless job with no watermark: its records' event time cannot be told from the query."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

bootstrap, source, sink, checkpoint = sys.argv[1:5]
spark = SparkSession.builder.appName("no-watermark").getOrCreate()
orders = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest").load())
out = orders.select("key", F.upper(F.col("value").cast("string")).alias("value"))
(out.writeStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
 .option("topic", sink).option("checkpointLocation", checkpoint)
 .trigger(availableNow=True).start().awaitTermination())
# a batch read of what was written, as a job might check its output
written = (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
           .option("subscribe", sink).option("includeHeaders", "true").load())
print("records written:", written.where("length(value) > 0").count(), flush=True)
