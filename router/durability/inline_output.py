"""A transactional batch's forwards, produced while the rest of the batch is being decided.

Why: with transactions a partition's checkpoint and output commit together
(router.durability.transactions), so the order in which they are produced inside the transaction
does not matter to durability. Producing each forward as it is decided lets the client send it while
the loop decides the next records, instead of producing every record of the batch at its end and
then waiting for them (docs/decisions/010-transactional-output-as-decided.md). Without transactions
the checkpoint must be durable before any output (router.worker.datapath), so the output is queued.

One :class:`InlineStream` per output partition and batch. It holds back its newest forward:
at the batch's end that record is queued and produced last, so it is the one whose delivery
report says where the batch landed (router.durability.output_writer.last_records). A forward decided
on the general path (a release of held records, a record the compiled path left) goes into the
live stream the same way (router.durability.output_writer.OutputWriter.forward), so one output
partition's records are always produced in the order they were decided, and none waits for
the batch's end. A produce error stops the stream (:meth:`InlineStream.stop`): the records are
queued, and the batch's end meets the error where it aborts the batch.

Before a partition's stream opens (router.worker.datapath), the worker checks that it still owns the
partition, looks for another writer's records at the end of the output partition, and begins
the partition's transaction: what it does before producing a queued batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Protocol

from confluent_kafka import KafkaException, Producer

from cutover.headers import SRC
from router.base.output_record import OutputRecord
from router.durability.partition import Owned
from router.durability.resume import Headers
from router.rule.oversize import is_too_large

log = logging.getLogger("cutover.router")

Forward = Callable[[Owned, str, int, "Headers | None", "bytes | None", "bytes | None"], None]


class OutputQueue(Protocol):
    """What a stream uses of the batch's router.durability.output_writer.OutputWriter, which
    opens it (so that module imports this one, and this one names only what it needs): the
    batch's queue, its queueing ``forward`` once the stream has stopped, and its ``refuse``
    of a record larger than the output topic takes."""

    queue: list[OutputRecord]

    def forward(self, owned: Owned, topic: str, off: int, headers: Headers | None,
                key: bytes | None, value: bytes | None) -> None: ...

    def refuse(self, owned: Owned, out: OutputRecord) -> None: ...


class InlineStream:
    """One output partition's forwards in one transactional batch."""

    __slots__ = ("held", "live", "output", "owned", "producer", "writer")

    def __init__(self, output: str, producer: Producer, writer: OutputQueue, owned: Owned) -> None:
        """``writer``: the batch's output writer (:class:`OutputQueue`)."""
        self.output = output
        self.owned = owned
        self.producer = producer
        self.writer = writer
        self.held: OutputRecord | None = None
        self.live = True

    def send(self, owned: Owned, topic: str, off: int, headers: Headers | None,
             key: bytes | None, value: bytes | None) -> None:
        """Forward raw record (topic, off): produce the one held back, hold this one."""
        if not self.live:
            self.writer.forward(owned, topic, off, headers, key, value)
            return
        owned.durability.queue_forward(topic, off)
        p = owned.partition
        src = f"{topic}:{p}:{off}".encode()
        held, self.held = self.held, (self.output, p, key, value,
                                      [*headers, (SRC, src)] if headers else [(SRC, src)], src)
        if held is None:
            return
        producer = self.producer
        while True:
            try:
                # positionally, in Producer.produce's order (topic, value, key, partition,
                # callback, on_delivery, timestamp, headers): its keyword parsing costs CPU
                # per record (docs/decisions/008; router/native/_fastpath.c passes them the
                # same way)
                producer.produce(held[0], held[3], held[2], p, None, None, 0, held[4])
                return
            except BufferError:
                producer.poll(0.05)
            except KafkaException as exc:
                self.failed(held, exc)
                return

    def failed(self, held: OutputRecord, exc: KafkaException) -> None:
        """Producing ``held`` failed: queue it, and stop the stream (its later forwards are
        queued too); the batch's end meets the error where it aborts the batch. A record
        larger than the output topic takes is dead-lettered instead (router.rule.oversize). Also
        called by the compiled path (router.native.compiled)."""
        log.warning("output %s:%d: %s; the batch's remaining output is produced at its end",
                    self.output, held[1], exc)
        if is_too_large(exc):
            self.writer.refuse(self.owned, held)
        else:
            self.writer.queue.append(held)
        self.stop()

    def stop(self) -> None:
        """Queue the held-back record; the partition's later forwards are queued after it."""
        if self.held is not None:
            self.writer.queue.append(self.held)
            self.held = None
        self.live = False
