"""One in-process Spark session for the tests that need Spark but not the launcher."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_tagger.kafka_source import CutoverKafka

    session = (SparkSession.builder.master("local[2]").appName("spark-tagger-tests")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .getOrCreate())
    session.dataSource.register(CutoverKafka)
    yield session
    session.stop()
