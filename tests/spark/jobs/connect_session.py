"""Job shapes on a Spark Connect session (``SparkSession.builder.remote(argv[1])``), one per
argv[6]: ``foreach-batch`` (a foreachBatch query mirroring its input to Kafka with the batch
writer, a few records per batch), ``batch-write`` (a batch Kafka write of one record whose
value is an epoch-ms time), ``shared-topic`` (two Kafka sinks on one topic, refused). Args: url
bootstrap input output checkpoint shape."""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame, SparkSession

url, bootstrap, source, sink, checkpoint, shape = sys.argv[1:7]
spark = SparkSession.builder.remote(url).getOrCreate()
if shape == "batch-write":
    (spark.createDataFrame([("k", "1767225600000")], "key STRING, value STRING")
     .write.format("kafka")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", sink).save())
    sys.exit(0)
orders = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", source).option("startingOffsets", "earliest")
          .option("maxOffsetsPerTrigger", "15").load()
          .withWatermark("timestamp", "5 seconds"))


if shape == "shared-topic":
    queries = [orders.select("key", "value").writeStream.format("kafka")
               .option("kafka.bootstrap.servers", bootstrap).option("topic", sink)
               .option("checkpointLocation", f"{checkpoint}-{i}").trigger(availableNow=True)
               .start() for i in (1, 2)]
    for q in queries:
        q.awaitTermination()
    sys.exit(0)


def mirror(batch: DataFrame, batch_id: int) -> None:
    (batch.select("key", "value").write.format("kafka")
     .option("kafka.bootstrap.servers", bootstrap).option("topic", sink).save())


(orders.writeStream.foreachBatch(mirror).queryName("mirror")
 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start()
 .awaitTermination())
