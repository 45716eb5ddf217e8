"""The pure-Python Kafka source and sink (``cutover_kafka``) in real streaming queries."""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from spark_test_support import offset_logs

from spark_tagger.kafka_source import rate_limit, source_schema
from spark_tagger.options import KafkaOptionError, SourceOptions
from spark_tagger.partitioner import partition_for
from testground.brokers import create_topics, end_offsets
from tests.topics import read_topic

pytestmark = [pytest.mark.spark, pytest.mark.broker]


# Record timestamps are recent: the broker deletes records older than its retention (seven days)
# whenever its retention check runs, and a fixed old timestamp made that a data loss mid-test.
BASE_TS = int(time.time() * 1000) - 3_600_000


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _produce(bootstrap: str, topic: str, records: list[dict[str, Any]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for r in records:
        producer.produce(topic, **r)
    assert producer.flush(30) == 0


def _inputs(n: int, start: int = 0, partitions: int = 3) -> list[dict[str, Any]]:
    out = []
    for i in range(start, start + n):
        key = None if i % 10 == 0 else f"k{i % 7}".encode()
        headers = [("trace", f"t{i}".encode()), ("empty", None)] if i % 3 else None
        out.append({"key": key, "value": json.dumps({"i": i}).encode(),
                    "partition": i % partitions, "headers": headers, "timestamp": BASE_TS + i})
    return out


def _round_trip(spark: Any, bootstrap: str, tin: str, tout: str, checkpoint: Path,
                **source_options: str) -> None:
    df = (spark.readStream.format("cutover_kafka")
          .option("kafka.bootstrap.servers", bootstrap).option("subscribe", tin)
          .option("includeHeaders", "true").options(**source_options).load())
    q = (df.select("key", "value", "headers").writeStream.format("cutover_kafka")
         .option("kafka.bootstrap.servers", bootstrap).option("topic", tout)
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination(240)
    assert q.exception() is None


def test_stream_round_trip_offsets_in_checkpoint_limit_and_headers(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    tin, tout = _name("src-in"), _name("src-out")
    create_topics(bootstrap, {tin: 3, tout: 5})
    first = _inputs(150)
    _produce(bootstrap, tin, first)
    checkpoint = tmp_path / "ck"
    _round_trip(spark, bootstrap, tin, tout, checkpoint,
                startingOffsets="earliest", maxOffsetsPerTrigger="40")

    def content(r: Any) -> tuple[Any, ...]:
        return (r.key, r.value, tuple(r.headers))

    out = read_topic(bootstrap, tout)
    expect = Counter((r["key"], r["value"], tuple(r["headers"] or ())) for r in first)
    assert Counter(content(r) for r in out) == expect
    for r in out:  # Kafka's default partitioner for keys; a hash of the value for null keys
        assert r.partition == partition_for(r.key, r.value, 5)

    logs = offset_logs(checkpoint, tin)
    assert len(logs) >= 4  # 150 records, at most 40 a batch
    prev = {p: 0 for p in range(3)}
    for log in logs:
        assert sum(log.ends[p] - prev[p] for p in prev) <= 40
        prev = log.ends
    assert prev == end_offsets(bootstrap, tin)

    # same checkpoint, more input: only the new records are read (offsets live in the checkpoint)
    more = _inputs(30, start=150)
    _produce(bootstrap, tin, more)
    _round_trip(spark, bootstrap, tin, tout, checkpoint, startingOffsets="earliest",
                maxOffsetsPerTrigger="40")
    out2 = read_topic(bootstrap, tout)
    assert Counter(content(r) for r in out2) == expect + Counter(
        (r["key"], r["value"], tuple(r["headers"] or ())) for r in more)


def test_starting_offsets_latest_then_new_records_only(
    spark: Any, bootstrap: str, tmp_path: Path
) -> None:
    tin, tout = _name("latest-in"), _name("latest-out")
    create_topics(bootstrap, {tin: 2, tout: 2})
    _produce(bootstrap, tin, _inputs(20, partitions=2))
    checkpoint = tmp_path / "ck"
    _round_trip(spark, bootstrap, tin, tout, checkpoint, startingOffsets="latest")
    assert read_topic(bootstrap, tout) == []
    _produce(bootstrap, tin, _inputs(6, start=100, partitions=2))
    _round_trip(spark, bootstrap, tin, tout, checkpoint, startingOffsets="latest")
    got = sorted(json.loads(r.value or b"")["i"] for r in read_topic(bootstrap, tout))
    assert got == list(range(100, 106))


def test_batch_read_columns_match_spark_kafka_schema(spark: Any, bootstrap: str) -> None:
    tin = _name("cols")
    create_topics(bootstrap, {tin: 2})
    _produce(bootstrap, tin, _inputs(10, partitions=2))
    df = (spark.read.format("cutover_kafka").option("kafka.bootstrap.servers", bootstrap)
          .option("subscribe", tin).option("includeHeaders", "true")
          .option("startingOffsets", json.dumps({tin: {"0": 1, "1": -2}}))
          .option("endingOffsets", json.dumps({tin: {"0": 4, "1": -1}})).load())
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>")
    rows = sorted(df.collect(), key=lambda r: (r.partition, r.offset))
    assert [(r.partition, r.offset) for r in rows] == [(0, 1), (0, 2), (0, 3)] + [
        (1, o) for o in range(5)]
    first = rows[0]
    i = json.loads(first.value)["i"]
    assert first.topic == tin and first.key == f"k{i % 7}".encode()
    assert int(first.timestamp.timestamp() * 1000) == BASE_TS + i
    assert first.timestampType == 0  # CreateTime, as Spark's connector reports it
    assert [(h.key, h.value) for h in first.headers] == [("trace", f"t{i}".encode()),
                                                          ("empty", None)]
    plain = (spark.readStream.format("cutover_kafka").option("kafka.bootstrap.servers", bootstrap)
             .option("subscribe", tin).load())
    assert "headers" not in plain.columns  # as Spark: headers only with includeHeaders=true


def test_sink_honours_partition_and_topic_columns(spark: Any, bootstrap: str) -> None:
    a, b = _name("sink-a"), _name("sink-b")
    create_topics(bootstrap, {a: 3, b: 3})
    rows = [("x", "1", a, 2), ("y", "2", b, None), ("z", "3", a, 0)]
    df = spark.createDataFrame(rows, "key STRING, value STRING, topic STRING, partition INT")
    df.write.format("cutover_kafka").option("kafka.bootstrap.servers", bootstrap).mode(
        "append").save()
    got = {(r.topic, r.partition, r.key, r.value) for r in
           read_topic(bootstrap, a) + read_topic(bootstrap, b)}
    assert got == {(a, 2, b"x", b"1"), (b, partition_for(b"y", None, 3), b"y", b"2"),
                   (a, 0, b"z", b"3")}


def test_option_errors_name_the_option() -> None:
    with pytest.raises(KafkaOptionError, match=r"kafka\.bootstrap\.servers"):
        SourceOptions.from_options({"subscribe": "t"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="exactly one of"):
        SourceOptions.from_options({"kafka.bootstrap.servers": "h:1"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="startingOffsets"):
        SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                    "startingOffsets": "yesterday"}, streaming=True)
    with pytest.raises(KafkaOptionError, match="maxOffsetsPerTrigger"):
        SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                    "maxOffsetsPerTrigger": "0"}, streaming=True)
    with pytest.raises(KafkaOptionError, match=r"'startingTimestamp' .* not supported"):
        SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "subscribe": "t",
                                    "startingTimestamp": "1000"}, streaming=True)
    opts = SourceOptions.from_options({"kafka.bootstrap.servers": "h:1", "subscribe": "a, b",
                                       "kafka.security.protocol": "PLAINTEXT",
                                       "kafka.key.deserializer": "x"}, streaming=True)
    assert opts.subscribe == ("a", "b") and opts.starting_offsets == "latest"
    assert opts.client == {"bootstrap.servers": "h:1", "security.protocol": "PLAINTEXT"}
    assert source_schema(False).endswith("timestampType INT")


def test_rate_limit_shares_by_backlog_like_spark() -> None:
    start = {"t": {"0": 0, "1": 100, "2": 5}}
    end = {"t": {"0": 300, "1": 200, "2": 5}}
    limited = rate_limit(start, end, 40)
    assert limited == {"t": {"0": 30, "1": 110, "2": 5}}
    assert rate_limit(start, end, 1000) == end
    # a tiny partition is not starved
    assert rate_limit({"t": {"0": 0, "1": 0}}, {"t": {"0": 1000, "1": 1}}, 10)["t"]["1"] == 1


def test_partitioner_matches_librdkafka_murmur2(bootstrap: str) -> None:
    """librdkafka's ``murmur2`` partitioner is the Java client's; ours must agree with it."""
    topic = _name("murmur")
    create_topics(bootstrap, {topic: 7})
    producer = Producer({"bootstrap.servers": bootstrap, "partitioner": "murmur2"})
    keys = [f"key-{i}".encode() for i in range(200)] + [b"", b"\xff\x00\x10", "ü".encode()]
    for k in keys:
        producer.produce(topic, key=k, value=k)
    assert producer.flush(30) == 0
    got = {r.key: r.partition for r in read_topic(bootstrap, topic)}
    assert got == {k: partition_for(k, None, 7) for k in keys}
