"""One in-process Spark session for the tests that need Spark but not the launcher."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """On Spark 4 with the pure-Python Kafka source registered; on Spark 3.5, which has no
    Python data source API, with Spark's own connector instead."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_tagger.spark_version import has_python_data_sources

    builder = (SparkSession.builder.master("local[2]").appName("spark-tagger-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    if not has_python_data_sources():
        from spark_test_support import connector_jars

        builder = builder.config("spark.jars", ",".join(map(str, connector_jars())))
    session = builder.getOrCreate()
    if has_python_data_sources():
        from spark_tagger.kafka_source import CutoverKafka

        session.dataSource.register(CutoverKafka)
    yield session
    session.stop()
