"""Which Spark the tagger runs on, and what differs between Spark 3.5 and Spark 4.

Spark 3.5 (the long-term-support line of the managed platforms) has no Python data source API
and no ``pyspark.sql.classic`` package: its DataFrame and Dataset classes live one package up,
and its Scala is 2.12, whose collection converters are not 2.13's.
The tagger's writes work the same on both (``foreachBatch`` and ``mapInArrow``); a job's Kafka
reads on 3.5 need Spark's own connector, since the pure-Python source (:mod:`.kafka_source`)
rests on the data source API.
"""

from __future__ import annotations

from typing import Any

CONNECTOR_ARTIFACT = "org.apache.spark:spark-sql-kafka-0-10_{scala}:{version}"


def spark_version() -> tuple[int, int]:
    """(major, minor) of the installed pyspark."""
    import pyspark

    major, minor = pyspark.__version__.split(".")[:2]
    return int(major), int(minor)


def has_python_data_sources() -> bool:
    """Spark 4's Python data source API (``spark.dataSource.register``)."""
    return spark_version() >= (4, 0)


def connector_coordinates() -> str:
    """The Maven coordinates of Spark's Kafka connector for the installed pyspark."""
    import pyspark

    scala = "2.13" if spark_version() >= (4, 0) else "2.12"
    return CONNECTOR_ARTIFACT.format(scala=scala, version=pyspark.__version__)


def classic_dataframe(jdf: Any, spark: Any) -> Any:
    """A classic (py4j) DataFrame around ``jdf``."""
    if spark_version() >= (4, 0):
        from pyspark.sql.classic.dataframe import DataFrame as Classic

        return Classic(jdf, spark)
    from pyspark.sql.dataframe import DataFrame

    return DataFrame(jdf, spark)


def dataset_of_rows(spark: Any, plan: Any) -> Any:
    """The JVM Dataset of a logical plan (``Dataset.ofRows``), in its version's package."""
    jvm = spark._jvm
    datasets = (jvm.org.apache.spark.sql.classic.Dataset if spark_version() >= (4, 0)
                else jvm.org.apache.spark.sql.Dataset)
    return datasets.ofRows(spark._jsparkSession, plan)


def java_list(jvm: Any, seq: Any) -> Any:
    """A Scala ``Seq`` as a ``java.util.List``."""
    if spark_version() >= (4, 0):
        return jvm.scala.jdk.javaapi.CollectionConverters.asJava(seq)
    return jvm.scala.collection.JavaConverters.seqAsJavaListConverter(seq).asJava()


def scala_seq(jvm: Any, items: Any) -> Any:
    """A ``java.util.List`` as a Scala ``Seq``."""
    if spark_version() >= (4, 0):
        return jvm.scala.jdk.javaapi.CollectionConverters.asScala(items).toSeq()
    return jvm.scala.collection.JavaConverters.asScalaBufferConverter(items).asScala().toSeq()
