"""The tagging writer on its own: the job's key, value and headers untouched, ``bg.*`` added."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from cutover.headers import BATCH, EVENT_TIME, VERSION, WATERMARK
from spark_tagger.options import SinkOptions, Tagging
from spark_tagger.partitioner import partition_for
from spark_tagger.tagger import TopicCount, write_tagged
from testground.brokers import create_topics
from tests.topics import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]


def test_job_headers_kept_reserved_ones_replaced_null_event_time_left_out(
    spark: Any, bootstrap: str
) -> None:
    topic = f"tagw-{uuid.uuid4().hex[:8]}"
    create_topics(bootstrap, {topic: 3})
    rows = [
        ("a", "v1", [("trace", b"t1"), ("bg.version", b"upstream"), ("bg.src", b"x:0:1")], 1000),
        (None, "v2", None, None),
        ("c", "v3", [("nil", None)], 3000),
    ]
    df = spark.createDataFrame(
        rows, "key STRING, value STRING, headers ARRAY<STRUCT<key: STRING, value: BINARY>>, "
              "__bg_event_time BIGINT")
    sink = SinkOptions(client={"bootstrap.servers": bootstrap}, topic=topic)
    counts = write_tagged(df.coalesce(1), sink, Tagging(
        version="green", batch=7, watermark=None, event_time_column="__bg_event_time"))
    assert counts == [TopicCount(topic=topic, records=3, without_event_time=1)]
    got = {r.value: r for r in read_topic(bootstrap, topic)}
    a, b, c = got[b"v1"], got[b"v2"], got[b"v3"]
    assert a.key == b"a" and a.partition == partition_for(b"a", None, 3)
    assert a.headers == (("trace", b"t1"), ("bg.src", b"x:0:1"), (VERSION, b"green"),
                         (EVENT_TIME, b"1000"), (BATCH, b"7"))
    assert b.key is None and b.partition == partition_for(None, b"v2", 3)
    assert b.headers == ((VERSION, b"green"), (BATCH, b"7"))  # router dead-letters it
    assert c.headers == (("nil", None), (VERSION, b"green"), (EVENT_TIME, b"3000"),
                         (BATCH, b"7"))
    assert all(r.header(WATERMARK) is None for r in got.values())  # before the first watermark
