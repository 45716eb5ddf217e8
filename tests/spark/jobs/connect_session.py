"""A job that builds a Spark Connect session (``SparkSession.builder.remote``)."""

from __future__ import annotations

import sys

from pyspark.sql import SparkSession

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
print("connected", spark.version, flush=True)
