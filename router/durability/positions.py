"""Where the data path put each raw partition, checked against the first record it delivers.

The data path positions a raw partition itself: when the group assigns it (at its resume
offsets) and when it is taken over again after an aborted or given-up batch (a seek back to its
checkpoint). The client applies a position in its own threads, and a new position can be
overtaken there: the chaos soak saw a partition sought back to its checkpoint, seconds after
its consumer was rebuilt and while Kafka moved partition leaders, deliver from the offset it
had been assigned at before; the ten records in between never reached the output. The data
path then forwards what it is given, so nothing else would notice.

So the first record at or past its position that each positioned partition delivers is checked
against it. Records before the position may come first (delivered again: a fetch that was under
way, or a client that reset an out-of-range position); they are decided again, and the output
and the dedup store know them, but they confirm nothing about the records after them, which
may still start past the position. At the position is right. Past it, the records in
between may be missing: that partition's records of the batch are not decided, and it is
sought to its position again. A partition
that comes back with the same first record twice has nothing in between to read (transaction
markers, or records deleted by retention), and goes on from there. One that keeps skipping
ahead after ``MAX_RESEEKS`` seeks is never let go on: the client is rebuilt
(:class:`router.base.errors.ConsumerFailed`), and the new one is assigned the partition at its
resume offsets.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from confluent_kafka import Consumer, KafkaException, Message, TopicPartition

from cutover.kafka_types import DataMessage
from router.base.errors import ConsumerFailed

log = logging.getLogger("cutover.router")

RawPartition = tuple[str, int]   # (raw topic, partition)

# Seeks after a first record above the position, each logged, before the client is rebuilt.
MAX_RESEEKS = 5


@dataclass
class Expected:
    offset: int                    # where the data path put the partition
    reseeks: int = 0
    last_first: int | None = None  # the first offset delivered after the last seek


@dataclass
class Recheck:
    """What :meth:`PositionCheck.check` found in a consumed batch."""

    kept: list[Message]            # the batch without the records of partitions sought again
    seek: list[TopicPartition] = field(default_factory=list)   # to seek to, in that order


class PositionCheck:
    """The positions not yet confirmed by a delivered record."""

    def __init__(self) -> None:
        self.expected: dict[RawPartition, Expected] = {}

    def positioned(self, tps: Iterable[TopicPartition]) -> None:
        """The data path put these partitions at their offsets (an assign, a seek)."""
        for tp in tps:
            if tp.offset >= 0:
                self.expected[(tp.topic, tp.partition)] = Expected(tp.offset)

    def clear(self) -> None:
        """A new consumer: nothing it was positioned at yet."""
        self.expected.clear()

    def check(self, consumer: Consumer, msgs: list[Message],
              owned: Iterable[RawPartition]) -> Recheck:
        """Check the first record of each positioned partition in ``msgs``. Costs a scan of
        the batch only while a position waits for its first record, and only when the client
        says it delivered one (its position moved).

        @raises ConsumerFailed: a partition skipped ahead after ``MAX_RESEEKS`` seeks."""
        if not self.expected:
            return Recheck(msgs)
        mine = set(owned)
        for gone in set(self.expected) - mine:
            del self.expected[gone]
        delivered = self._delivered(consumer)
        if not delivered:
            return Recheck(msgs)
        first: dict[RawPartition, int] = {}
        for m in msgs:
            if m.error() is not None:
                continue
            if TYPE_CHECKING:  # a record (cutover.kafka_types); a cast costs a call
                m = cast(DataMessage, m)
            key = (m.topic(), m.partition())
            if key in delivered and key not in first:
                offset = m.offset()
                if offset < self.expected[key].offset:
                    # A record before the position, delivered again (decided before: the
                    # output and the dedup store know it). It confirms nothing: what counts is
                    # the first record at or past the position, which may come after a jump.
                    continue
                first[key] = offset
                if len(first) == len(delivered):
                    break
        again: list[TopicPartition] = []
        confirmed: list[str] = []
        for key, offset in first.items():
            e = self.expected[key]
            if offset == e.offset or offset == e.last_first:
                if offset > e.offset:
                    log.info("%s:%d delivered from offset %d after it was put at %d, again: "
                             "nothing to read in between (transaction markers or records "
                             "deleted by retention)", key[0], key[1], offset, e.offset)
                confirmed.append(f"{key[0]}:{key[1]} from {offset}" +
                                 ("" if offset == e.offset else f" (put at {e.offset})"))
                del self.expected[key]
                continue
            if e.reseeks >= MAX_RESEEKS:
                raise ConsumerFailed(f"{key[0]}:{key[1]} was put at offset {e.offset} "
                                     f"{e.reseeks + 1} times and delivered from past it each "
                                     f"time (last from {offset})")
            log.warning("%s:%d was put at offset %d and delivered from %d first: its records "
                        "of this batch are not decided and it is put at %d again (the client "
                        "may have lost the position)", key[0], key[1], e.offset, offset,
                        e.offset)
            e.reseeks += 1
            e.last_first = offset
            again.append(TopicPartition(key[0], key[1], e.offset))
        if confirmed:   # one line per positioning: what a replay read first, for forensics
            log.info("positions confirmed by the first record delivered: %s",
                     ", ".join(confirmed))
        if not again:
            return Recheck(msgs)
        dropped = {(tp.topic, tp.partition) for tp in again}
        kept = [m for m in msgs
                if m.error() is not None or (m.topic(), m.partition()) not in dropped]
        return Recheck(kept, again)

    def _delivered(self, consumer: Consumer) -> set[RawPartition]:
        """The waiting partitions whose client position is not where they were put: a record
        was delivered since (a position not known yet means none was)."""
        tps = [TopicPartition(t, p) for t, p in self.expected]
        try:
            positions = consumer.position(tps)
        except KafkaException:   # asked again at the next batch
            return set()
        return {(tp.topic, tp.partition) for tp in positions
                if tp.offset >= 0 and tp.offset != self.expected[(tp.topic, tp.partition)].offset}
