"""Typed views of the messages confluent-kafka's clients hand back.

A ``confluent_kafka.Message`` is typed for every kind of message (typings/confluent_kafka): an
error may have no topic, partition or offset, so ``topic()``, ``partition()`` and ``offset()``
are Optional. :class:`DataMessage` is a record: a consumed message whose ``error()`` is None,
or a delivery report without an error from a producer with ``acks`` other than 0 (the
router's are ``all``); librdkafka always gives it its topic, partition and offset.
:class:`PartitionEnd` is the end-of-partition event (``KafkaError._PARTITION_EOF``, with
``enable.partition.eof``), with its topic, partition and offset (the partition's end) set too.
``key()``, ``value()`` and ``headers()`` keep Message's types: None for a null key or value,
or a record without headers.

A message becomes one by a cast right after the check that makes it one::

    for msg in consumer.consume(n, timeout):
        if msg.error() is not None:
            ...
            continue
        msg = cast(DataMessage, msg)

For the type checker these are subclasses of ``Message``; at run time they are ``Message``
itself, and the cast returns its argument. ``cast`` is still a function call: loops where a
call per record counts (the router's data path, the readers of whole partitions) make it for
the type checker alone, under ``if TYPE_CHECKING``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from confluent_kafka import KafkaError, Message

if TYPE_CHECKING:
    class DataMessage(Message):
        """A record, consumed or delivered: ``error()`` is None, topic, partition and offset
        are set."""

        def error(self) -> None: ...
        def topic(self) -> str: ...
        def partition(self) -> int: ...
        def offset(self) -> int: ...

    class PartitionEnd(Message):
        """The end of a partition (``KafkaError._PARTITION_EOF``): ``offset()`` is its end."""

        def error(self) -> KafkaError: ...
        def topic(self) -> str: ...
        def partition(self) -> int: ...
        def offset(self) -> int: ...
else:
    DataMessage = PartitionEnd = Message

__all__ = ["DataMessage", "PartitionEnd"]
