"""The exact watermark of a micro-batch, read from the query's checkpoint.

Spark writes ``offsets/<batchId>`` (the write-ahead log) before it runs the batch; its second
line holds ``batchWatermarkMs``, the watermark that batch uses. ``lastProgress`` lags a batch and
the listener reports after the fact, so the file is the only exact source, and a replayed batch
reads the same file (same watermark, same headers, byte-identical duplicates).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ConfigDict


class OffsetLogMetadata(BaseModel):
    """The part of an ``offsets/<id>`` file the tagger uses."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    batchWatermarkMs: int = 0
    batchTimestampMs: int = 0


def parse_offset_log(text: str) -> OffsetLogMetadata:
    """Parse the file: ``v<N>`` then the metadata JSON, then one line per source."""
    lines = text.splitlines()
    if len(lines) < 2 or not lines[0].startswith("v"):
        raise ValueError(f"not a Spark offset log file: {text[:80]!r}")
    return OffsetLogMetadata.model_validate(json.loads(lines[1]))


def read_offset_log(spark: Any, checkpoint_root: str, batch_id: int) -> str:
    """Text of ``<root>/offsets/<batch_id>`` through Hadoop's FileSystem (local, HDFS, S3...)."""
    jvm = spark._jvm
    path = jvm.org.apache.hadoop.fs.Path(f"{checkpoint_root.rstrip('/')}/offsets/{batch_id}")
    fs = path.getFileSystem(spark._jsc.hadoopConfiguration())
    stream = fs.open(path)
    try:
        return str(jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
    finally:
        stream.close()


def batch_watermark(spark: Any, checkpoint_root: str, batch_id: int) -> int | None:
    """The batch's watermark in epoch ms, or None before the first watermark (Spark's 0)."""
    meta = parse_offset_log(read_offset_log(spark, checkpoint_root, batch_id))
    return meta.batchWatermarkMs or None
