"""Where a raw partition resumes: the bookkeeping behind every checkpoint. Pure, no I/O.

The rule this module holds (docs/design.md, "Durability: the output log is the record of
truth"): a partition's resume offsets never pass a record that is held, not yet decided, or
whose output (forward, dead letter, shadow) is queued but not yet delivered; and the
checkpoint's ``readback_from`` is never above an output record whose raw offset is at or after
those resume offsets. A batch's checkpoint is durable before its output is produced
(router.worker.datapath), so a crash in between replays those records and the read-back
(router.durability.readback) tells what was delivered from what was lost.

The same state keeps the output position the worker knows (what it read back plus what it
delivered), which is where the next read-back may start, and the point of the output log
before which every record is older than the dedup retention (``rebuild_from``): a worker whose
local store is missing rebuilds it from there (router.durability.takeover).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

Headers = list[tuple[str, bytes | None]]   # a Kafka record's headers

# Rebuild marks kept at most; dropping the older half only moves rebuild_from earlier (safe).
MAX_REBUILD_MARKS = 10_000


@dataclass(slots=True)
class Ref:
    """What the loop keeps of a raw record while it is undecided (``Incoming.ref``)."""

    topic: str
    offset: int
    headers: Headers | None
    out_pos: int   # output position when the record was read (read-back lower bound)


class Ahead(NamedTuple):
    """An output record another writer put there whose raw offset this worker has not passed:
    the read-back point stays at or below it until the resume offsets pass its raw offset."""

    topic: str
    offset: int          # raw offset
    output_offset: int


class RebuildMark(NamedTuple):
    """At a checkpoint: the partition's horizon and the output position then."""

    horizon: int
    output_offset: int


class ResumePoint(NamedTuple):
    offsets: dict[str, int]   # input topic -> first raw offset to read again
    readback_from: int        # output offset from which records at or after `offsets` may exist


class CheckpointPoint(NamedTuple):
    """The durability half of a partition checkpoint (router.durability.checkpoint.Checkpoint)."""

    seq: int
    offsets: dict[str, int]
    readback_from: int
    rebuild_from: int
    owner_gen: int


@dataclass(slots=True)
class Durability:
    """One owned raw partition's resume and output positions."""

    next_offsets: dict[str, int]   # input topic -> first offset not yet decided
    out_pos: int                   # output position after the records queued in this batch
    known_end: int                 # output end as this worker knows it (read back + delivered)
    rebuild_from: int
    seq: int = 0                   # of the last checkpoint written
    owner_gen: int = 0             # ownership generation of the checkpoints this worker writes
    # Raw records already in the output log (read back at takeover, or written by another
    # writer): never forwarded again.
    skip: set[tuple[str, int]] = field(default_factory=set)
    ahead: list[Ahead] = field(default_factory=list)
    # Lowest raw offset per input topic whose output is queued in the current batch.
    undelivered: dict[str, int] = field(default_factory=dict)
    queued: int = 0                # output-topic records of this partition queued this batch
    delivered_to: int = 0          # one past the highest output offset delivered this batch
    dirty: bool = True             # the next step writes a checkpoint
    # The batch's output commits with its checkpoint (transactions): see resume_point.
    atomic: bool = False
    rebuild_marks: collections.deque[RebuildMark] = field(default_factory=collections.deque)

    # -- queueing (called per queued output) ------------------------------------------------

    def mark_undelivered(self, topic: str, offset: int) -> None:
        """Output of raw record (topic, offset) is queued (a dead letter or shadow copy): the
        batch's checkpoint resumes at or before it."""
        low = self.undelivered.get(topic)
        if low is None or offset < low:
            self.undelivered[topic] = offset

    def queue_forward(self, topic: str, offset: int) -> None:
        """A forward of raw record (topic, offset) is queued for the output partition."""
        low = self.undelivered.get(topic)
        if low is None or offset < low:
            self.undelivered[topic] = offset
        self.out_pos += 1
        self.queued += 1

    # -- checkpoints --------------------------------------------------------------------------

    def resume_point(self, held: Iterable[Ref]) -> ResumePoint:
        """Resume offsets that pass no undecided, held or undelivered record, and the output
        offset from which a record with a raw offset at or after them may exist. Forgets the
        ``ahead`` records the resume offsets have passed.

        With ``atomic`` (transactions: the batch's output, dead letters, shadow copies and
        checkpoint commit together, or none of them) the batch's queued output does not hold
        the resume offsets back: once the checkpoint is there, so is that output. Held back,
        a takeover after the commit and before the next checkpoint decided those records
        again, and their dead letters and shadow copies, which nothing reads back, were
        written twice."""
        offsets = dict(self.next_offsets)
        if not self.atomic:
            for topic, low in self.undelivered.items():
                if low < offsets.get(topic, low + 1):
                    offsets[topic] = low
        readback = self.out_pos
        for ref in held:
            if ref.offset < offsets.get(ref.topic, ref.offset + 1):
                offsets[ref.topic] = ref.offset
            readback = min(readback, ref.out_pos)
        if self.ahead:
            self.ahead = [a for a in self.ahead if a.offset >= offsets.get(a.topic, 0)]
            readback = min([readback, *(a.output_offset for a in self.ahead)])
        return ResumePoint(offsets, readback)

    def next_checkpoint(self, held: Iterable[Ref], horizon: int | None,
                        retention_ms: int) -> CheckpointPoint:
        """The next checkpoint's positions (its ``seq`` is one more than the last one's).
        Outputs queued in this batch are not delivered yet: read back from before them."""
        offsets, readback = self.resume_point(held)
        readback = min(readback, self.out_pos - self.queued)
        self.seq += 1
        return CheckpointPoint(self.seq, offsets, readback,
                               self.advance_rebuild(horizon, retention_ms), self.owner_gen)

    def advance_rebuild(self, horizon: int | None, retention_ms: int) -> int:
        """Record the output position at this horizon; move ``rebuild_from`` up to the newest
        mark that the retention window has left behind (never down)."""
        marks = self.rebuild_marks
        marks.append(RebuildMark(horizon if horizon is not None else 0,
                                 self.out_pos - self.queued))
        if horizon is not None:
            limit = horizon - retention_ms
            while len(marks) > 1 and marks[1].horizon < limit:
                marks.popleft()
            if marks[0].horizon < limit:
                self.rebuild_from = max(self.rebuild_from, marks[0].output_offset)
        if len(marks) > MAX_REBUILD_MARKS:
            for _ in range(len(marks) // 2):
                marks.popleft()
        return self.rebuild_from

    def batch_done(self) -> None:
        """The batch's output is delivered: the next checkpoint (written at the next step, even
        an idle one) may resume past those records; with ``atomic`` the batch's own did."""
        self.queued = 0
        self.dirty = bool(self.undelivered) and not self.atomic
        self.undelivered.clear()

    # -- the output partition ----------------------------------------------------------------

    def start_delivery(self) -> None:
        self.delivered_to = self.known_end

    def delivered(self, output_offset: int) -> None:
        if output_offset >= self.delivered_to:
            self.delivered_to = output_offset + 1

    def take_delivery(self) -> bool:
        """Close the batch's delivery count (nothing is queued any more); True when exactly the
        batch's records landed right after the end this worker knew. Otherwise something else
        is in between: the caller reads the output from ``known_end`` (another writer's
        records, or a retry's second copy) before :meth:`settle_delivery`."""
        contiguous = self.delivered_to == self.known_end + self.queued
        self.queued = 0
        return contiguous

    def settle_delivery(self) -> None:
        self.known_end = max(self.known_end, self.delivered_to)
        self.out_pos = self.known_end

    def committed(self) -> None:
        """The batch's transaction committed: its marker follows the records in the output
        partition (one offset)."""
        self.known_end += 1
        self.out_pos = self.known_end + self.queued

    def note_foreign(self, src: tuple[str, int], output_offset: int,
                     resume: dict[str, int]) -> None:
        """Another writer's output record for raw record ``src``: never forward it again; keep
        the read-back point at or below it while its raw offset is not passed."""
        self.skip.add(src)
        if src[1] >= resume.get(src[0], 0):
            self.ahead.append(Ahead(src[0], src[1], output_offset))

    def absorbed(self, end: int, dropped: int) -> None:
        """After reading another writer's records up to ``end``: ``dropped`` queued outputs
        they already cover are gone from the batch."""
        self.queued -= dropped
        self.known_end = end
        self.out_pos = end + self.queued
