"""Job shapes the tagger refuses, one per argv[5]; each must stop before writing anything.

* ``overwrite``: a foreachBatch function writing to Kafka in save mode overwrite;
* ``complete``: a windowed count in complete output mode to a Kafka sink;
* ``plain-batch``: a batch Kafka write outside any streaming query, with no --event-time.
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

bootstrap, source, sink, checkpoint, shape = sys.argv[1:6]
spark = SparkSession.builder.appName(f"refused-{shape}").getOrCreate()
orders = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest").load()
          .withWatermark("timestamp", "5 seconds"))


def overwrite(batch: DataFrame, batch_id: int) -> None:
    (batch.select("key", "value").write.format("kafka").mode("overwrite")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", sink).save())


if shape == "overwrite":
    query = (orders.writeStream.foreachBatch(overwrite).queryName("mirror")
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
elif shape == "complete":
    counts = (orders.groupBy(F.window("timestamp", "10 seconds")).count()
              .select(F.col("count").cast("string").alias("value")))
    query = (counts.writeStream.format("kafka").outputMode("complete")
             .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
             .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
else:
    (spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("subscribe", source).load().select("key", "value")
     .write.format("kafka").option("kafka.bootstrap.servers", bootstrap)
     .option("topic", sink).save())
    sys.exit(0)
query.awaitTermination()
