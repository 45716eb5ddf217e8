"""When the pure-Python Kafka source calls an "offset out of range" data loss
(spark_tagger/range_reader.py), on a real broker, through ``read_range`` (one Spark task's read,
which needs no Spark session):

- a reset error an earlier assignment of the reused consumer left queued does not fail the next
  task's read, whether it names another offset or the very offset the task waits for (then the
  broker's offsets are asked, and the offset is there);
- records deleted below the range are data loss, named with the partition's new start, and with
  ``failOnDataLoss=false`` the read skips to what is left;
- a range the partition no longer reaches (its end is below the plan's) is data loss too.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_tagger.kafka_client import cached_consumer
from spark_tagger.options import SourceOptions, consumer_config
from spark_tagger.range_reader import DataLossError, KafkaRange, read_range
from testground.brokers import create_topics

pytestmark = pytest.mark.broker

SCHEMA = StructType([
    StructField("key", BinaryType()), StructField("value", BinaryType()),
    StructField("topic", StringType()), StructField("partition", IntegerType()),
    StructField("offset", LongType()), StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
])


def _topic(bootstrap: str, records: int) -> str:
    name = f"oor-{uuid.uuid4().hex[:10]}"
    create_topics(bootstrap, {name: 1})
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(records):
        producer.produce(name, value=b"v%d" % i, key=b"k%d" % i, partition=0)
    assert producer.flush(15) == 0
    return name


def _options(bootstrap: str, topic: str, fail_on_data_loss: bool) -> SourceOptions:
    return SourceOptions(client={"bootstrap.servers": bootstrap}, subscribe=(topic,),
                         fail_on_data_loss=fail_on_data_loss, poll_timeout_ms=20_000)


def _offsets(opts: SourceOptions, rng: KafkaRange) -> list[int]:
    return [o for batch in read_range(opts, SCHEMA, rng)
            for o in batch.column("offset").to_pylist()]


def _leave_a_refused_reset(opts: SourceOptions, topic: str, offset: int) -> None:
    """An earlier use of the cached consumer asks for ``offset`` past the partition's end and
    leaves before reading librdkafka's answer: a refused reset, queued without a version."""
    consumer = cached_consumer(consumer_config(opts.client, opts.fail_on_data_loss))
    consumer.assign([TopicPartition(topic, 0, offset)])
    time.sleep(3)
    consumer.unassign()


def test_reset_error_left_by_an_earlier_assignment_does_not_fail_the_next_read(
        bootstrap: str) -> None:
    topic = _topic(bootstrap, 5)
    opts = _options(bootstrap, topic, fail_on_data_loss=True)
    _leave_a_refused_reset(opts, topic, 40)

    assert _offsets(opts, KafkaRange(topic, 0, 0, 5)) == [0, 1, 2, 3, 4]


def test_a_stale_reset_error_at_the_awaited_offset_is_checked_and_the_read_goes_on(
        bootstrap: str) -> None:
    topic = _topic(bootstrap, 5)
    opts = _options(bootstrap, topic, fail_on_data_loss=True)
    # Offset 7 did not exist when the reset was refused (the partition ended at 5); it exists
    # now, and a task waits for exactly it.
    _leave_a_refused_reset(opts, topic, 7)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5, 10):
        producer.produce(topic, value=b"v%d" % i, partition=0)
    assert producer.flush(15) == 0

    assert _offsets(opts, KafkaRange(topic, 0, 7, 10)) == [7, 8, 9]


def test_deleted_records_are_data_loss_named_with_the_new_start(bootstrap: str) -> None:
    topic = _topic(bootstrap, 20)
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.delete_records([TopicPartition(topic, 0, 12)])
    for future in futures.values():
        future.result(30)

    with pytest.raises(DataLossError, match=r":0: offset 0 is no longer available: the "
                                            r"partition now starts at 12 .*failOnDataLoss=false"):
        _offsets(_options(bootstrap, topic, True), KafkaRange(topic, 0, 0, 20))
    assert _offsets(_options(bootstrap, topic, False), KafkaRange(topic, 0, 0, 20)) == \
        list(range(12, 20))


def test_a_range_past_the_partition_end_is_data_loss(bootstrap: str) -> None:
    topic = _topic(bootstrap, 5)
    with pytest.raises(DataLossError, match=r"offset 7 is no longer available: the partition "
                                            r"now ends at 5 although this batch was planned "
                                            r"up to 9"):
        _offsets(_options(bootstrap, topic, True), KafkaRange(topic, 0, 7, 9))
