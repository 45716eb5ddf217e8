"""A batch's output: queued by the loop, fenced against another writer, produced, checked.

Output partition ``p`` has one writer, the owner of raw partition ``p``
(router.durability.ownership). Before producing, the writer asks for the end of every output
partition it has records for: a previous owner that stalled after its last ownership check (a
zombie) can still deliver one batch after this worker read the output back. Those records are read
and absorbed (their raw offsets join the skip set, their identities the dedup store; queued outputs
they already cover are dropped). After delivery it checks that each output partition received
exactly its records, contiguously after the end it knew. Without transactions anything else in
between is absorbed the same way and reported (:meth:`OutputWriter.settle`). With them the check
runs in each partition's commit thread, before its commit (:meth:`Sent.check`), and a partition
whose batch did not land contiguously is aborted and replayed from its checkpoint: what another
writer put among the batch's own records cannot be read while the batch's transaction is open, and
can once it is aborted. The data path's thread does not wait for the delivery: it consumes the next
batch meanwhile (router.durability.batch_end).

Each queued output is a plain tuple (router.base.output_record.OutputRecord), read by unpacking.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from confluent_kafka import Consumer, KafkaError, Message, Producer, TopicPartition

from cutover.headers import ERROR, SRC
from cutover.kafka_types import DataMessage
from router.base.errors import OutputWriteFailed
from router.base.kafka_io import ATTEMPT_S, end_offsets_each, fatal_errors_raised, read_to_end
from router.base.output_record import OutputRecord
from router.durability.inline_output import InlineStream
from router.durability.partition import Owned
from router.durability.readback import Identities, ReadBack, note
from router.durability.resume import Durability, Headers, Ref
from router.rule.oversize import HEADER_ROOM, dead_letter_of, wire_size, without_value

log = logging.getLogger("cutover.router")

Destination = tuple[str, int]   # (topic, partition) written to
Report = Callable[[KafkaError | None, Message], None]
# A destination's producer, the delivery report of its records (None: no report) and that of
# its last record (with transactions only that one reports: :func:`last_records`).
Sink = tuple[Producer, Report | None, Report | None]


def last_records(queue: list[OutputRecord], tracked: set[Destination]) -> dict[int, Destination]:
    """Queue index -> destination, of the last queued record of each ``tracked`` output
    partition: with transactions, the only records whose delivery is reported.

    Why one report is enough there: a transactional producer is idempotent, so one partition's
    records land in the order produced, each once; and a record that fails makes the
    transaction abortable, so its commit fails and the batch is replayed from its checkpoint
    (router.durability.transactions). The last record's offset alone then says whether the batch
    landed contiguously after the end this worker knew. Why not report every record: a delivery
    report costs more CPU than the router's whole routing of the record
    (docs/decisions/008-compiled-per-record-path.md). The scan stops once every tracked
    partition is found (the output is interleaved: a few records from the end)."""
    left = set(tracked)
    last: dict[int, Destination] = {}
    for i in range(len(queue) - 1, -1, -1):
        if not left:
            break
        dest = (queue[i][0], queue[i][1])
        if dest in left:
            left.discard(dest)
            last[i] = dest
    return last


@dataclass(frozen=True)
class ForeignRead:
    """An output partition to read past the end its worker knew
    (:meth:`OutputWriter._absorb_foreign`). ``ours``: bg.src -> how many of those records
    this worker delivered since ``start``; ``end``: the end the probe saw (with transactions,
    the last stable offset: it counts transaction markers and aborted records, which a
    read_committed read does not return)."""

    owned: Owned
    start: int
    ours: dict[bytes, int]
    end: int = 0


class _Absorbing:
    """What the read of one :class:`ForeignRead` found so far."""

    def __init__(self, read: ForeignRead) -> None:
        self.read = read
        self.rb = ReadBack(end=read.start)
        self.resume, _ = read.owned.durability.resume_point(read.owned.held_refs())
        self.foreign: dict[bytes | None, tuple[str, int] | None] = {}
        self.found = Identities()
        self.twice = 0   # second copies of a record in the output

    def take(self, msg: DataMessage) -> None:
        ours = self.read.ours
        src_raw = next((v for k, v in msg.headers() or () if k == SRC), b"")
        if src_raw is not None and ours.get(src_raw, 0) > 0:  # None: bg.src with no value
            ours[src_raw] -= 1   # one of ours
            return
        src = note(self.rb, msg, self.resume, self.read.owned.route.identity, self.found)
        if src_raw in self.foreign or src_raw in ours:
            self.twice += 1
        self.foreign[src_raw] = src
        if src is not None:
            self.read.owned.durability.note_foreign(src, msg.offset(), self.resume)


class OutputWriter:
    """Writes the batches of the partitions this worker owns."""

    def __init__(self, conf: dict[str, Any], producer: Producer, probe: Consumer,
                 attempt_s: float = ATTEMPT_S) -> None:
        """``conf``: a reader's client settings (to read output partitions back); ``probe``:
        a consumer of its own for ListOffsets (on the data consumer the request queues behind
        its long-poll fetch: docs/decisions/011); ``attempt_s``:
        one ListOffsets request's time before it is asked again (``request_timeout_s``)."""
        self.conf = conf
        self.producer = producer
        self.probe = probe
        self.attempt_s = attempt_s
        self.queue: list[OutputRecord] = []
        # output partition -> its forwards of this batch produced as decided (transactions)
        self.streams: dict[Destination, InlineStream] = {}
        # The end of every owned output partition was checked in this batch, before its first
        # stream opened (:meth:`fence_foreign_writes` with ``every``); reset by end_streams.
        self.checked_every = False

    # -- queueing ---------------------------------------------------------------------------

    def forward(self, owned: Owned, topic: str, off: int, headers: Headers | None,
                key: bytes | None, value: bytes | None) -> None:
        """Forward raw record (topic, off) to output partition p, with its ``bg.src``: into
        the partition's output stream of this batch while it is live
        (router.durability.inline_output; a release of held records or a record the compiled path
        left, produced as decided and in decision order like the fast path's), else queued for the
        batch's end."""
        p = owned.partition
        if self.streams:
            stream = self.streams.get((owned.route.settings.output, p))
            if stream is not None and stream.live:
                stream.send(owned, topic, off, headers, key, value)
                return
        owned.durability.queue_forward(topic, off)
        src = f"{topic}:{p}:{off}".encode()
        hdrs: Headers = [*headers, (SRC, src)] if headers else [(SRC, src)]  # one list built
        self.queue.append((owned.route.settings.output, p, key, value, hdrs, src))

    def dead_letter(self, owned: Owned, ref: Ref, key: bytes | None, value: bytes | None,
                    reason: str | None) -> None:
        dead_letter = owned.route.settings.dead_letter
        assert dead_letter is not None  # RouteSettings defaults it to "<output>.dlq"
        self._copy(owned, ref, dead_letter, key, value, (ERROR, (reason or "unknown").encode()))

    def shadow(self, owned: Owned, ref: Ref, key: bytes | None, value: bytes | None) -> None:
        shadow = owned.route.settings.shadow
        assert shadow is not None
        self._copy(owned, ref, shadow, key, value)

    def _copy(self, owned: Owned, ref: Ref, topic: str, key: bytes | None,
              value: bytes | None, *extra: tuple[str, bytes]) -> None:
        """Queue a copy of raw record ``ref`` to ``topic`` (dead letter, shadow copy): its
        headers, then ``extra``, then its ``bg.src``."""
        owned.durability.mark_undelivered(ref.topic, ref.offset)
        src = (SRC, f"{ref.topic}:{owned.partition}:{ref.offset}".encode())
        hdrs: Headers = [*(ref.headers or ()), *extra, src]
        self.queue.append((topic, owned.partition, key, value, hdrs, None))

    def refuse(self, owned: Owned, out: OutputRecord) -> None:
        """Dead-letter forward ``out`` instead: it is larger than the output topic takes
        (router.rule.oversize). It no longer counts as forwarded, nor as queued output."""
        rs = owned.route.settings
        assert rs.dead_letter is not None and out[5] is not None
        limit = owned.route.max_record_bytes
        log.warning("output %s:%d: the record from %s is larger than the %d bytes the topic "
                    "takes: dead-lettered", rs.output, owned.partition, out[5].decode(), limit)
        dur = owned.durability
        dur.queued -= 1   # its raw offset stays marked undelivered, as the forward marked it
        dur.out_pos -= 1
        counters = owned.router.counters
        counters.forwarded -= 1
        counters.dead_lettered += 1
        topic, p, key, hdrs = dead_letter_of(rs.dead_letter, owned.partition, out[2], out[3],
                                             out[4], limit)
        self.queue.append((topic, p, key, None, hdrs, None))

    def _refuse_oversize(self, parts: Iterable[Owned]) -> None:
        """Before producing: a queued forward larger than its producer takes is dead-lettered
        instead (:meth:`refuse`), a dead letter or shadow copy that large loses its value
        (router.rule.oversize). Sizes are added up only where the key and value alone come within
        64 KiB of the limit."""
        owner: dict[Destination, Owned] = {}
        for o in parts:
            rs = o.route.settings
            for topic in (rs.output, rs.dead_letter, rs.shadow):
                if topic is not None:
                    owner[(topic, o.partition)] = o
        over: dict[int, Owned] = {}   # queue index -> the partition of a record over
        for i, (topic, p, key, value, headers, _src) in enumerate(self.queue):
            owned = owner.get((topic, p))
            if owned is None:
                continue
            limit = owned.route.max_record_bytes
            if (len(key or b"") + len(value or b"") + HEADER_ROOM > limit
                    and wire_size(key, value, headers) > limit):
                over[i] = owned
        if not over:
            return
        queue, self.queue = self.queue, []
        for i, out in enumerate(queue):
            refused_by = over.get(i)
            if refused_by is None:
                self.queue.append(out)
            elif out[5] is not None:
                self.refuse(refused_by, out)
            else:
                self.queue.append(without_value(out, refused_by.route.max_record_bytes))

    def open_stream(self, owned: Owned, producer: Producer) -> InlineStream:
        """The partition's stream for this batch (router.durability.inline_output); the caller has
        checked ownership, fenced (:meth:`fence_foreign_writes`) and begun the transaction."""
        dest = (owned.route.settings.output, owned.partition)
        stream = self.streams.get(dest)
        if stream is None:
            stream = self.streams[dest] = InlineStream(dest[0], producer, self, owned)
        return stream

    def reset(self) -> None:
        """Forget the batch in progress (the worker is rebuilding its clients: the batch is
        replayed from the partitions' checkpoints)."""
        self.queue = []
        self.streams.clear()
        self.checked_every = False

    def end_streams(self) -> bool:
        """The batch is decided: queue each stream's held-back record (produced last). True
        when the end of every owned output partition was checked in this batch, before any of
        its output was produced (the batch's first stream did it)."""
        for stream in self.streams.values():
            stream.stop()
        self.streams.clear()
        checked, self.checked_every = self.checked_every, False
        return checked

    # -- fencing ------------------------------------------------------------------------------

    def fence_foreign_writes(self, parts: Iterable[Owned], every: bool = False
                             ) -> set[tuple[str, int]]:
        """Before producing, look for output records this worker did not write.

        ListOffsets(LATEST) above the end this worker knows means someone else wrote (true on
        the test broker too, whose answer is the last batch's base offset + 1: never above the
        real end, and above our known end only if a batch started there). One ListOffsets
        request for every output partition with queued records (``every``: for each of
        ``parts``, as a partition's output starts being produced as decided), per batch.
        Returns the partitions (route, partition) whose output end was not answered
        (router.base.kafka_io.end_offsets_each): nothing of theirs may be written in this batch.
        """
        writing = [o for o in parts if every or o.durability.queued]
        if not writing:
            self.checked_every = self.checked_every or every
            return set()
        tps = [TopicPartition(o.route.settings.output, o.partition) for o in writing]
        ends, unanswered = end_offsets_each(self.probe, tps, self.attempt_s)
        past: list[ForeignRead] = []
        for owned, tp in zip(writing, tps, strict=True):
            latest = ends.get((tp.topic, tp.partition))
            if latest is not None and latest > owned.durability.known_end:
                past.append(ForeignRead(owned, owned.durability.known_end, {}, latest))
        if past:
            self._absorb_foreign(past)
        self.checked_every = self.checked_every or every
        missing = {(tp.topic, tp.partition) for tp in unanswered}
        return {(o.route.settings.name, o.partition) for o, tp in zip(writing, tps, strict=True)
                if (tp.topic, tp.partition) in missing}

    def _absorb_foreign(self, reads: list[ForeignRead]) -> None:
        """Read each output partition of ``reads`` from its start to its end and take in every
        record not its worker's own: skip set, dedup store, readback bound; drop queued
        outputs they already cover. The partitions of one output topic are read by one
        consumer together: a takeover checks every partition it owns at once
        (:meth:`fence_foreign_writes` with ``every``), and read one after the other, a few
        hundred partitions took seconds."""
        rounds: list[dict[tuple[str, int], _Absorbing]] = []
        for read in reads:
            dest = (read.owned.route.settings.output, read.owned.partition)
            free = next((r for r in rounds if dest not in r), None)
            if free is None:
                rounds.append(free := {})
            free[dest] = _Absorbing(read)
        for absorbing in rounds:
            by_topic: dict[str, dict[int, _Absorbing]] = {}
            for (topic, p), a in absorbing.items():
                by_topic.setdefault(topic, {})[p] = a
            for topic, parts in by_topic.items():
                for msg in read_to_end(self.conf, topic,
                                       {p: a.read.start for p, a in parts.items()}):
                    parts[msg.partition()].take(msg)
            for a in absorbing.values():
                self._absorbed(a)

    def _absorbed(self, a: _Absorbing) -> None:
        """What one output partition's read found: written to the store, queued outputs it
        covers dropped, reported."""
        owned, start, ours, end = a.read.owned, a.read.start, a.read.ours, a.read.end
        rs = owned.route.settings
        p = owned.partition
        dur = owned.durability
        foreign, resume = a.foreign, a.resume
        # Their identities are written now (the next checkpoint may read back from past them),
        # apart from the open batch's, which stay buffered until it is delivered
        # (router.durability.batch_end.flush_store). Written with them, the store held
        # identities of records never forwarded after an abort or a crash before delivery; it
        # is trusted one checkpoint behind (router.durability.takeover), so their replay found them
        # and suppressed them as duplicates.
        owned.store.write_now(a.found)
        dropped: set[bytes] = set()
        if foreign and dur.queued:
            keep: list[OutputRecord] = []
            for out in self.queue:
                topic, part, _key, _value, _headers, src_of = out
                if topic == rs.output and part == p and src_of is not None \
                        and src_of in foreign:
                    dropped.add(src_of)
                    continue
                keep.append(out)
            self.queue[:] = keep
            c = owned.router.counters
            c.forwarded -= len(dropped)
            c.duplicates += len(dropped)
        # Foreign copies of raw records this worker had already decided (and not just now):
        # if it forwarded them, they are in the output twice.
        passed = sum(1 for raw, src in foreign.items() if raw not in dropped and raw not in ours
                     and src is not None and src[1] < resume.get(src[0], 0))
        dur.absorbed(max(a.rb.end, start, end), len(dropped))
        if not foreign:
            return  # only transaction markers or aborted records past the known end
        report = log.error if a.twice or passed else log.warning
        report("output %s:%d: %d records from another writer (a previous owner that had not yet "
               "noticed losing the partition) at offsets %d..%d; %d queued outputs they cover "
               "were dropped; %d are certainly and %d possibly in the output twice",
               rs.output, p, len(foreign), start, dur.known_end - 1, len(dropped), a.twice,
               passed)

    # -- producing ----------------------------------------------------------------------------

    def send(self, parts: Iterable[Owned],
             producer_of: Callable[[str, int], Producer] | None = None) -> Sent:
        """Produce the queued batch, waiting for nothing: :meth:`settle` waits and checks it
        (without transactions), or each partition's commit thread does (:meth:`Sent.check`).
        ``producer_of(topic, partition)``: the partition's transactional producer
        (router.durability.transactions), else the worker's one."""
        parts = list(parts)
        self._refuse_oversize(parts)
        writing = [o for o in parts if o.durability.queued]
        sent = Sent(writing, self.queue, {}, {})
        tracked = {(o.route.settings.output, o.partition): o.durability for o in writing}
        for dur in tracked.values():
            dur.start_delivery()
        # With transactions, only each output partition's last record reports its delivery
        # (why: :func:`last_records`); without, every record does.
        last = {} if producer_of is None else last_records(self.queue, set(tracked))
        sinks: dict[Destination, Sink] = {}
        last_topic, last_p = "", -1
        for i, (topic, p, key, value, headers, _src) in enumerate(self.queue):
            if p != last_p or topic != last_topic:  # the queue holds runs of one partition
                last_topic, last_p = topic, p
                dest = (topic, p)
                sink = sinks.get(dest)
                if sink is None:
                    producer = self.producer if producer_of is None else producer_of(*dest)
                    sink = sinks[dest] = sent.sink(producer, tracked.get(dest),
                                                   every=producer_of is None)
                producer, every, tracker = sink
            cb = tracker if i in last else every
            while True:
                try:
                    producer.produce(topic, value, key, partition=p, headers=headers,
                                     on_delivery=cb)
                    break
                except BufferError:
                    producer.poll(0.05)
        self.queue = []
        return sent

    def settle(self, sent: Sent, budget_s: Callable[[], float]) -> None:
        """Wait for a batch's output (at most ``budget_s()`` seconds, at least one); then check
        that each output partition received exactly our records, contiguously after the end we
        knew (anything else in between was written by another writer, or twice by a retry:
        absorbed and reported)."""
        left = sum(pr.flush(max(budget_s(), 1.0)) for pr in sent.producers.values())
        failure = _failure([e for errs in sent.errors.values() for e in errs], left)
        if failure:
            raise OutputWriteFailed(f"{failure}; the worker stops and resumes from its "
                                    "checkpoint")
        for owned in sent.writing:
            dur = owned.durability
            if not dur.take_delivery():
                out, part = owned.route.settings.output, owned.partition
                ours: dict[bytes, int] = {}
                for topic, p, _key, _value, _headers, src in sent.batch:
                    if topic == out and p == part and src is not None:
                        ours[src] = ours.get(src, 0) + 1
                self._absorb_foreign([ForeignRead(owned, dur.known_end, ours)])
            dur.settle_delivery()


def _failure(errors: list[str], left: int) -> str | None:
    """What went wrong with a batch's output, from its delivery errors and how many of its
    records a flush left undelivered; None when nothing did."""
    if errors or left:
        return f"output produce failed ({errors[0] if errors else f'{left} not delivered'})"
    return None


@dataclass
class Sent:
    """A batch's output, produced and not known delivered yet. ``errors``: the delivery errors
    reported so far, per producer (``id``)."""

    writing: list[Owned]    # partitions with output records in the batch
    batch: list[OutputRecord]
    producers: dict[int, Producer]
    errors: dict[int, list[str]]

    def sink(self, producer: Producer, tracked: Durability | None, every: bool) -> Sink:
        """The delivery reports of one destination's records: dead letters and shadow copies
        always report (their errors are the batch's); output records report into their
        partition's ``tracked`` delivery count, each (``every``) or only the last."""
        errors = self.errors.setdefault(id(producer), [])
        self.producers[id(producer)] = producer

        def on_delivery(err: KafkaError | None, _msg: Message) -> None:
            if err is not None:
                errors.append(str(err))

        if tracked is None:
            return producer, on_delivery, on_delivery

        def on_output(err: KafkaError | None, msg: Message) -> None:
            if err is not None:
                errors.append(str(err))
            else:
                if TYPE_CHECKING:  # delivered (acks=all): its offset is set; a cast costs a call
                    msg = cast(DataMessage, msg)
                tracked.delivered(msg.offset())

        return producer, on_output if every else None, on_output

    def check(self, owned: Owned | None, producer: Producer, timeout_s: float) -> None:
        """With transactions, in the partition's commit thread, before its commit: wait for the
        partition's output (``producer``: its transactional producer; ``owned``: the
        partition, if the batch wrote its output partition) and check that it landed right
        after the end this worker knew. Raise :class:`OutputWriteFailed` otherwise: the caller
        aborts the transaction, and the partition is replayed from its checkpoint, whose read
        back takes in what is in between (router.worker.datapath). Why abort rather than absorb, as
        :meth:`OutputWriter.settle` does: records another writer put among this worker's own
        lie past the last stable offset, which the open transaction holds at its first record,
        so they cannot be read before it ends; aborted, they can."""
        with fatal_errors_raised():
            left = producer.flush(timeout_s)
        failure = _failure(self.errors.get(id(producer), []), left)
        if failure:
            raise OutputWriteFailed(failure)
        if owned is None:
            return
        dur = owned.durability
        start, queued = dur.known_end, dur.queued
        if not dur.take_delivery():
            raise OutputWriteFailed(
                f"output {owned.route.settings.output}:{owned.partition}: the batch's "
                f"{queued} records landed at offsets up to {dur.delivered_to - 1}, not right "
                f"after the end this worker knew ({start}): another writer's records are "
                "among them; they are read in when the partition is replayed from its "
                "checkpoint; find the other writer of the output topic and stop it")
        dur.settle_delivery()
