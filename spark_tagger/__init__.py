"""Make an unmodified PySpark Structured Streaming job emit tagged records and heartbeats.

``cutover tag --version V [--event-time COLUMN|EXPR] -- job.py [args]`` runs ``job.py`` as the
Spark driver after patching PySpark (:mod:`.launcher`): the job's ``writeStream.format("kafka")``
is served by the tagging sink (:mod:`.tagger`), which stamps every record with ``bg.version``,
``bg.event_time``, ``bg.watermark`` and ``bg.batch`` (the contract in ``cutover.headers``) and
writes a heartbeat to every partition of the output topic after each micro-batch. The Kafka
writes of its ``foreachBatch`` functions are tagged with their query's batch
(:mod:`.foreach_batch`, :mod:`.batch_writer`), and a job on Spark Connect has its Kafka sinks
tagged through the plan it sends (:mod:`.connect`). Its ``readStream.format("kafka")`` uses the
pure-Python connector ``cutover_kafka`` (:mod:`.kafka_source`) wherever Spark's JVM Kafka
connector is absent.

Spark settings for a job run this way go where PySpark reads them, e.g.
``PYSPARK_SUBMIT_ARGS="--master local[2] --conf spark.sql.shuffle.partitions=2 pyspark-shell"``.
The connector also works on its own: ``spark.dataSource.register(CutoverKafka)`` then
``format("cutover_kafka")`` with the options of Spark's Kafka connector.
"""
